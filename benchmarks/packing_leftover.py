"""Where the unallocated GPU sits once the arrival-only experiment ends (130 % arrived).

For each trace, policy and seed, the experiment of `nomad-gpu simulate packing` is run to its end
and the free GPU left is split three ways:

- CPU-starved: on nodes whose free CPU is below the smallest CPU ask of every GPU task that failed,
  so no task that failed could have used it whatever its size;
- holes: on the other nodes, GPUs whose free milli is below the smallest GPU ask (milli per GPU) of
  every task that failed;
- usable: the rest (free GPU some failed task was small enough for, by CPU and by size, and that it
  still could not take: a model it may not run on, or too few such GPUs on one node).

It also names the commonest hole size and how many GPUs carry it, and how much GPU all the
workload's shares that small ask for: the most that any placement could fill those holes with.
This is what bounds the gain left at saturation (docs/packing.md). Usage:

    .venv/bin/python benchmarks/packing_leftover.py [--traces default,gpushare100] [--seeds 42-44]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from nomad_gpu.domain.requests import GpuShare
from nomad_gpu.sim.packing import place_seed
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, load_trace
from nomad_gpu.sim.workload import build_workload

POLICIES = ("fgd", "frag-aware")
Figures = dict[str, float]


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def _milli_per_gpu(pod_gpu_milli: int, num_gpu: int) -> int:
    return pod_gpu_milli if num_gpu == 1 else 1000


def leftover(job: tuple[str, str, int]) -> tuple[str, str, int, Figures]:
    name, policy, seed = job
    trace = load_trace(NODES_CSV, PODS_CSV[name])
    _, ledger, failed = place_seed(trace, policy, seed)
    cap = float(trace.gpu_milli_capacity)
    gpu_failed = [p for p in failed if p.num_gpu > 0 and p.gpu_milli > 0]
    min_cpu = min((p.cpu_milli for p in gpu_failed), default=0)
    min_milli = min((_milli_per_gpu(p.gpu_milli, p.num_gpu) for p in gpu_failed), default=0)
    starved = holes = usable = 0
    sizes: Counter[int] = Counter()
    for nf in ledger.index.nodes():
        frees = [nf.gpu_free[gid] for gid, _, _ in nf.layout()]
        if nf.cpu_free < min_cpu:
            starved += sum(frees)
            continue
        for free in frees:
            if 0 < free < min_milli:
                holes += free
                sizes[free] += 1
            else:
                usable += free
    hole, count = sizes.most_common(1)[0] if sizes else (0, 0)
    small = sum(a.gpu.milli for a in (p.to_ask() for p in build_workload(trace, seed).tasks)
                if isinstance(a.gpu, GpuShare) and a.gpu.milli <= hole)
    return name, policy, seed, {
        "unallocated": 100 * (starved + holes + usable) / cap, "starved": 100 * starved / cap,
        "holes": 100 * holes / cap, "usable": 100 * usable / cap, "hole_milli": hole, "hole_gpus": count,
        "hole_points": 100 * hole * count / cap, "small_share_points": 100 * small / cap,
        "failed": len(failed)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="default,gpushare100")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    jobs = [(name, policy, seed) for name in args.traces.split(",") for policy in POLICIES
            for seed in _seeds(args.seeds)]
    with ProcessPoolExecutor(args.workers) as pool:
        runs = list(pool.map(leftover, jobs))
    print("unallocated GPU at 130 % arrived, points of the cluster's GPU (mean over seeds)\n")
    print("| trace | policy | unallocated | CPU-starved | holes | usable | commonest hole | GPUs with it "
          "| its points | shares that small |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.traces.split(","):
        for policy in POLICIES:
            got = [f for t, p, _, f in runs if t == name and p == policy]
            mean = {k: statistics.fmean(f[k] for f in got) for k in got[0]}
            holes = sorted({int(f["hole_milli"]) for f in got})
            print(f"| {name} | {policy} | {mean['unallocated']:.2f} | {mean['starved']:.2f} | {mean['holes']:.2f} "
                  f"| {mean['usable']:.2f} | {'/'.join(map(str, holes))} milli | {mean['hole_gpus']:.0f} "
                  f"| {mean['hole_points']:.2f} | {mean['small_share_points']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
