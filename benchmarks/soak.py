"""Soak: many short jobs through `nomad-gpu serve`, with the service's resident memory sampled as they
complete. Memory must stay flat after warm-up (the faults issue: under 20 % growth), which is what the
bounds on the allocation index, stream buffers, metric labels and entry history are for.

The dev cluster and the service run as their own processes; jobs are posted in waves that keep a few
hundred queued, and the service's RSS is read (psutil) after every `--sample-every` completions.
Prints JSON: RSS at warm-up and at the end, the growth, jobs per second.

    python benchmarks/soak.py [--jobs 20000] [--warmup 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

from nomad_gpu.service.demo import free_port, start_dev_cluster

CLUSTER = Path(__file__).resolve().parents[1] / "clusters" / "seed-a800.yaml"
SPEC = "name: soak-{i}\nteam: t{team}\ntask: {{image: busybox}}\nresources: {{cpu: 100, memory: 128}}\n" \
       "gpu: {{count: 1}}\ndev: {{duration_s: 1}}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--sample-every", type=int, default=1_000)
    parser.add_argument("--queued", type=int, default=200, help="entries kept waiting at any time")
    parser.add_argument("--speed", type=float, default=50.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="nomad-gpu-soak-"))
    nomad, nomad_url = start_dev_cluster(CLUSTER, args.speed)
    port = free_port()
    addr = f"http://127.0.0.1:{port}"
    (workdir / "config.yaml").write_text("tick_s: 1\n", encoding="utf-8")
    log = open(workdir / "service.log", "wb")  # noqa: SIM115 (kept open for the child's life)
    service = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", str(workdir / "q.db"),
                                "--listen", addr, "--config", str(workdir / "config.yaml")],
                               env={**os.environ, "NOMAD_ADDR": nomad_url}, stdout=log, stderr=log)
    session = requests.Session()
    session.headers.update({"Content-Type": "application/yaml", "X-Nomad-Gpu-Client": "bench"})
    samples: list[dict[str, float]] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if session.get(f"{addr}/v1/status", timeout=1).json().get("ready"):
                    break
            except (requests.RequestException, ValueError):
                time.sleep(0.1)
        proc = psutil.Process(service.pid)
        started, posted, done, next_sample = time.monotonic(), 0, 0, args.warmup
        while done < args.jobs:
            status = session.get(f"{addr}/v1/status", timeout=10).json()
            waiting = int(status["queued"]) + int(status["live"])
            done = posted - waiting
            while posted < args.jobs and posted - done < args.queued:
                body = SPEC.format(i=posted, team=posted % 5)
                session.post(f"{addr}/v1/jobs", data=body.encode(), timeout=10).raise_for_status()
                posted += 1
            if done >= next_sample:
                samples.append({"done": done, "rss_mib": round(proc.memory_info().rss / 2**20, 1),
                                "elapsed_s": round(time.monotonic() - started, 1)})
                print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
                next_sample += args.sample_every
            time.sleep(0.2)
        wall = time.monotonic() - started
        cpu = proc.cpu_times()
    finally:
        service.terminate()
        service.wait(10)
        nomad.terminate()
        nomad.wait(10)
    warm, last = samples[0]["rss_mib"], samples[-1]["rss_mib"]
    report = {"jobs": args.jobs, "warmup_jobs": args.warmup, "rss_mib_after_warmup": warm, "rss_mib_end": last,
              "rss_growth_pct": round(100.0 * (last - warm) / warm, 1), "jobs_per_s": round(args.jobs / wall, 1),
              "service_cpu_s": round(cpu.user + cpu.system, 1), "wall_s": round(wall, 1), "samples": samples}
    print(json.dumps(report, indent=2))
    return 0 if report["rss_growth_pct"] < 20 else 1


if __name__ == "__main__":
    sys.exit(main())
