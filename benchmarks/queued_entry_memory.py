"""Memory held per queued entry of the largest spec the API accepts (issue 26, item 4).

Submits N entries of a 238 KB spec (1,000 env entries of 230 characters) through the API's checks
(`service/admission/submission.py` `check_request`) and `SchedulerService.submit`, as a POST does, and prints the
process's RSS before and after, per entry; with ``--trace`` also the Python heap they hold (tracemalloc).
``--db FILE`` puts the queue in a database file (else in memory, where SQLite's pages hold the stored specs too).

    python benchmarks/queued_entry_memory.py [--db FILE] [--trace] [-n 40]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from typing import Any

from nomad_gpu.service.admission.access import Caller
from nomad_gpu.service.admission.submission import Request, check_request
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import open_store


class _NoNomad:
    """Nothing is admitted (no node is known), so nothing reaches Nomad."""

    def submit(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("no register expected")

    def stop(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no stop expected")

    def job_state(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no read expected")

    def ping(self) -> None:
        raise AssertionError("no probe expected")


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def body(i: int) -> bytes:
    pairs = ", ".join(f"K{k}: {'x' * 230}" for k in range(1000))
    return f"name: big-{i}\nteam: t\ntask: {{image: i, env: {{{pairs}}}}}\ngpu: {{count: 1}}\n".encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("-n", type=int, default=40)
    args = parser.parse_args()
    svc = SchedulerService(open_store(args.db or ":memory:"), _NoNomad(),
                           SchedulingSettings())
    rules, caller = AccessSettings(), Caller()
    bodies = [body(i) for i in range(args.n)]
    check_request(Request(body(-1), "application/yaml", rules, caller))  # warm: imports and caches
    if args.trace:
        tracemalloc.start()
    gc.collect()
    before = rss_mib()
    for b in bodies:
        checked = check_request(Request(b, "application/yaml", rules, caller))
        svc.submit(checked.data, spec=checked.spec)
    del checked
    gc.collect()
    after = rss_mib()
    print(f"spec {len(bodies[0])} bytes, {args.n} queued: RSS {before:.1f} -> {after:.1f} MiB, "
          f"{(after - before) / args.n:.3f} MiB per entry")
    if args.trace:
        print(f"Python heap held: {tracemalloc.get_traced_memory()[0] / args.n / 2**20:.3f} MiB per entry")
    svc.stop()


if __name__ == "__main__":
    main()
