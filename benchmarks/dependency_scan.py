"""What `after:` on a big queued sweep costs every cycle (issue 31, item 8).

One GPU, held by a running job; a queued sweep of N trials (at most 4 at once) that waits for it; D
entries `after:` that sweep; then another team submits a CPU-only job. Prints the scheduling cycle's
time (median of 5) and the other team's admission latency (its submission to its admission, through
`SchedulerService.run_cycle` as the cycle loop runs it), the queue in a database file as the service
keeps it.

    python benchmarks/dependency_scan.py [--trials 10000] [--dependents 20] [--parallel 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, Node
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, open_store


class _Nomad:
    """Takes every register (nothing runs: the benchmark times the service's side only)."""

    def submit(self, *args: Any, **kwargs: Any) -> str:
        return "hcl"

    def stop(self, *args: Any, **kwargs: Any) -> None:
        return None

    def job_state(self, *args: Any, **kwargs: Any) -> None:
        return None

    def ping(self) -> None:
        return None


class _Inline:
    def submit(self, fn: Any, *args: Any) -> None:
        fn(*args)


def job(name: str, team: str, *, gpus: int = 1, after: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "team": team, "task": {"image": "b"},
                           "resources": {"cpu": 100, "memory": 128}, "after": list(after)}
    if gpus:
        out["gpu"] = {"count": gpus}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--dependents", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=4, help="the sweep's max_parallel (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        svc = SchedulerService(open_store(str(Path(tmp) / "q.db")), _Nomad(), SchedulingSettings(),
                               executor=_Inline())
        gpu = Gpu(InstanceId("GPU-n1-0"), "NVIDIA A100-SXM4-80GB", 81_920)
        svc.on_resync([Node(NodeId("n1"), name="n1", cpu_mhz=64_000, memory_mb=512_000, gpus=(gpu,))], [])
        svc.submit(job("blocker", "a"))
        svc.run_cycle()  # the one GPU is taken from now on
        sweep = {**job("big", "a"), "kind": "sweep",
                 "sweep": {"parameters": {"lr": [i / args.trials for i in range(args.trials)]},
                           **({"max_parallel": args.parallel} if args.parallel else {})}}
        sweep_id = svc.submit(sweep)[0].sweep or ""
        for i in range(args.dependents):
            svc.submit(job(f"after-{i}", "a", after=(sweep_id,)))
        svc.run_cycle()  # the first cycle after the submissions (reasons written)
        cycles = []
        for _ in range(5):
            started = time.perf_counter()
            svc.run_cycle()
            cycles.append(time.perf_counter() - started)
        started = time.perf_counter()
        other = svc.submit(job("other-team", "b", gpus=0))[0].id
        while svc.store.get(other).state is EntryState.QUEUED:
            svc.run_cycle()
        latency = time.perf_counter() - started
        svc.stop()
    print(f"{args.trials} queued trials, {args.dependents} entries after the sweep: cycle "
          f"{statistics.median(cycles) * 1000:.1f} ms (median of 5), another team's admission {latency * 1000:.1f} ms")


if __name__ == "__main__":
    main()
