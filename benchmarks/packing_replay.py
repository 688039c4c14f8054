"""The queueing replay of both bundled traces, our default policy against FGD, over several node samples.

One replay (`nomad-gpu simulate replay`) runs on one seeded sample of the nodes. Its median wait
sits on the steep front of the burst, where a shift of a few admissions moves it by tens of seconds,
so one sample cannot tell a policy's effect from the sample's: this runs each seed's sample with
both policies (paired) and prints, per trace, every seed's p50 and p95 wait and the medians over
seeds. Usage:

    .venv/bin/python benchmarks/packing_replay.py --seeds 42-51 --workers 2 [--json replay.json]
    .venv/bin/python benchmarks/packing_replay.py --seeds 42-51 --from-json replay.json   # report again
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from nomad_gpu.sim.replay import ReplayConfig, run_replay
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, load_trace

BASE, OURS = "fgd", "frag-aware"


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


Run = tuple[str, str, int, dict[str, float]]
"""(trace, policy, seed, figures)"""


def _one(job: tuple[str, str, int, float, float]) -> Run:
    name, policy, seed, speedup, fraction = job
    t0 = time.monotonic()
    result = run_replay(load_trace(NODES_CSV, PODS_CSV[name]), policy,
                        ReplayConfig(speedup=speedup, node_fraction=fraction, seed=seed))
    return name, policy, seed, {
        "p50": result.wait_pct(50), "p95": result.wait_pct(95), "p99": result.wait_pct(99),
        "util": result.mean_util_arrivals_pct, "started": result.started, "never": result.never_started,
        "mean": result.to_json()["wait_s"]["mean"], "multi_gpu_mean": result.to_json()["wait_multi_gpu_s"]["mean"],
        "multi_gpu": len(result.multi_gpu_waits), "multi_gpu_held": result.multi_gpu_held,
        "last_start_h": round(result.last_start_s / 3600, 2), "seconds": round(time.monotonic() - t0, 1)}


def _report(runs: list[Run], traces: list[str], seeds: list[int]) -> None:
    """Per trace: each seed's waits (s) for both policies, the medians over seeds, and on how many
    seeds ours is no worse; `multi` is the mean wait of the tasks asking for more than one GPU."""
    cols = ("p50", "p95", "mean", "multi_gpu_mean")
    print(f"| trace | seed | {BASE} p50 | {OURS} p50 | {BASE} p95 | {OURS} p95 | {BASE} mean | {OURS} mean "
          f"| {BASE} multi-GPU mean | {OURS} multi-GPU mean |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in traces:
        by = {(p, s): f for t, p, s, f in runs if t == name}

        def row(label: str, get: dict[str, tuple[float, float]], name: str = name) -> None:
            print(f"| {name} | {label} | " + " | ".join(f"{get[q][0]:,.1f} | {get[q][1]:,.1f}" for q in cols) + " |")

        for seed in seeds:
            row(str(seed), {q: (by[(BASE, seed)][q], by[(OURS, seed)][q]) for q in cols})
        row(f"median of {len(seeds)}", {q: (statistics.median(by[(BASE, s)][q] for s in seeds),
                                            statistics.median(by[(OURS, s)][q] for s in seeds)) for q in cols})
        wins = {q: sum(1 for s in seeds if by[(OURS, s)][q] <= by[(BASE, s)][q]) for q in cols}
        print(f"| {name} | no worse, seeds of {len(seeds)} | " + " | ".join(f"| {wins[q]}" for q in cols) + " |")
    for name in traces:
        by = {(p, s): f for t, p, s, f in runs if t == name}
        if all("multi_gpu_held" in f and f["multi_gpu"] for f in by.values()):
            print(f"\n{name}: multi-GPU tasks that had nodes held for them before they started, {BASE} / {OURS}: "
                  + ", ".join(f"{s}: {by[(BASE, s)]['multi_gpu_held']:.0f} / {by[(OURS, s)]['multi_gpu_held']:.0f}"
                              for s in seeds) + f" (of {by[(BASE, seeds[0])]['multi_gpu']:.0f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="default,gpushare100")
    parser.add_argument("--seeds", default="42-46")
    parser.add_argument("--speedup", type=float, default=2000.0)
    parser.add_argument("--node-fraction", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    parser.add_argument("--from-json", type=Path, default=None, help="report the runs a previous --json wrote")
    args = parser.parse_args()
    traces, seeds = args.traces.split(","), _seeds(args.seeds)
    if args.from_json:
        runs: list[Run] = [(r.pop("trace"), r.pop("policy"), r.pop("seed"), r)
                           for r in json.loads(args.from_json.read_text())]
    else:
        jobs = [(name, policy, seed, args.speedup, args.node_fraction)
                for name in traces for seed in seeds for policy in (BASE, OURS)]
        with ProcessPoolExecutor(args.workers) as pool:
            runs = list(pool.map(_one, jobs))
        print(f"# {sum(f['seconds'] for _, _, _, f in runs):.0f} s of replays", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps([{"trace": t, "policy": p, "seed": s, **f} for t, p, s, f in runs], indent=1))
    print(f"replay, speedup {args.speedup:g}, nodes x{args.node_fraction:g}: wait (s), {OURS} against {BASE}\n")
    _report(runs, traces, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
