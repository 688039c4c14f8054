"""The floor a companion service is measured against: a bare loop that renders a job's HCL with jinja2,
asks Nomad to parse it (`POST /v1/jobs/parse`) and registers it with python-nomad, nothing else.

No queue, no store, no placement choice, no event stream: each job is pinned to the next free GPU of a
list given to it. What `nomad-gpu serve` spends per job beyond this is the price of what it adds (a
durable queue, admission on a concrete placement, the watcher); `benchmarks/scale.py --against-bare`
runs both against the same fleet and prints the ratio.

Run by scale.py as its own process:

    python benchmarks/bare_loop.py --nomad URL --template FILE --pins FILE --jobs N

`--template` is a jinja2 template of one job's HCL (the service's own rendering of the same job, with
its job ID, node ID and device ID made `{{ job_id }}`, `{{ node_id }}` and `{{ device_id }}`); `--pins`
a JSON list of [node ID, device ID], one per job. Prints one JSON line: the loop's own CPU seconds
(user + system, from the first render to the last register's reply; imports and set-up excluded, as
the service's start-up is excluded from its figure) and its registers per second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import jinja2
import nomad


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nomad", required=True, help="Nomad's address, http://host:port")
    parser.add_argument("--template", required=True, type=Path)
    parser.add_argument("--pins", required=True, type=Path)
    parser.add_argument("--jobs", required=True, type=int)
    parser.add_argument("--prefix", default="bare", help="job IDs are PREFIX-000000, ...")
    args = parser.parse_args()
    url = urlsplit(args.nomad)
    client = nomad.Nomad(host=url.hostname, port=url.port, timeout=30, verify=False)
    template = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined).from_string(
        args.template.read_text(encoding="utf-8"))
    pins = json.loads(args.pins.read_text(encoding="utf-8"))
    if len(pins) < args.jobs:
        print(f"{len(pins)} pins for {args.jobs} jobs", file=sys.stderr)
        return 2
    cpu0, wall0 = cpu_s(), time.monotonic()
    for i in range(args.jobs):
        node_id, device_id = pins[i]
        job_id = f"{args.prefix}-{i:06d}"
        hcl = template.render(job_id=job_id, node_id=node_id, device_id=device_id)
        job = client.jobs.parse(hcl, canonicalize=False)
        client.jobs.request(method="post", json={"Job": job, "Submission": {"Source": hcl, "Format": "hcl2"}})
    cpu, wall = cpu_s() - cpu0, time.monotonic() - wall0
    print(json.dumps({"jobs": args.jobs, "cpu_s": round(cpu, 4), "wall_s": round(wall, 3),
                      "cpu_ms_per_job": round(1000 * cpu / args.jobs, 3),
                      "registers_per_s": round(args.jobs / wall, 1) if wall else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
