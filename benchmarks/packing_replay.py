"""The queueing replay of both bundled traces, our default policy against FGD, over several node samples.

One replay (`nomad-gpu simulate replay`) runs on one seeded sample of the nodes. Its median wait
sits on the steep front of the burst, where a shift of a few admissions moves it by tens of seconds,
so one sample cannot tell a policy's effect from the sample's: this runs each seed's sample with
both policies (paired) and prints, per trace, every seed's p50 and p95 wait and the medians over
seeds. Usage:

    .venv/bin/python benchmarks/packing_replay.py --seeds 42-46 --workers 2 [--json replay.json]
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
        "multi_gpu_mean": result.to_json()["wait_multi_gpu_s"]["mean"],
        "last_start_h": round(result.last_start_s / 3600, 2), "seconds": round(time.monotonic() - t0, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="default,gpushare100")
    parser.add_argument("--seeds", default="42-46")
    parser.add_argument("--speedup", type=float, default=2000.0)
    parser.add_argument("--node-fraction", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    args = parser.parse_args()
    jobs = [(name, policy, seed, args.speedup, args.node_fraction)
            for name in args.traces.split(",") for seed in _seeds(args.seeds) for policy in (BASE, OURS)]
    with ProcessPoolExecutor(args.workers) as pool:
        runs = list(pool.map(_one, jobs))
    if args.json:
        args.json.write_text(json.dumps([{"trace": t, "policy": p, "seed": s, **f} for t, p, s, f in runs], indent=1))
    print(f"replay, speedup {args.speedup:g}, nodes x{args.node_fraction:g}: wait (s), {OURS} against {BASE}\n")
    print(f"| trace | seed | {BASE} p50 | {OURS} p50 | {BASE} p95 | {OURS} p95 | {BASE} GPU % | {OURS} GPU % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.traces.split(","):
        by = {(p, s): f for t, p, s, f in runs if t == name}
        seeds = _seeds(args.seeds)
        for seed in seeds:
            b, o = by[(BASE, seed)], by[(OURS, seed)]
            print(f"| {name} | {seed} | {b['p50']:.1f} | {o['p50']:.1f} | {b['p95']:.1f} | {o['p95']:.1f} "
                  f"| {b['util']:.2f} | {o['util']:.2f} |")
        med = {(p, q): statistics.median(by[(p, s)][q] for s in seeds) for p in (BASE, OURS)
               for q in ("p50", "p95", "util")}
        wins = {q: sum(1 for s in seeds if by[(OURS, s)][q] <= by[(BASE, s)][q]) for q in ("p50", "p95")}
        print(f"| {name} | median of {len(seeds)} | {med[(BASE, 'p50')]:.1f} | {med[(OURS, 'p50')]:.1f} "
              f"| {med[(BASE, 'p95')]:.1f} | {med[(OURS, 'p95')]:.1f} | {med[(BASE, 'util')]:.2f} "
              f"| {med[(OURS, 'util')]:.2f} |")
        print(f"| {name} | no worse, seeds of {len(seeds)} | | {wins['p50']} | | {wins['p95']} | | |")
        multi = [(by[(BASE, s)]["multi_gpu_mean"], by[(OURS, s)]["multi_gpu_mean"]) for s in seeds]
        print(f"\n{name}, mean wait of multi-GPU tasks ({BASE} / {OURS}): "
              + ", ".join(f"{s}: {b:.0f} / {o:.0f} s" for s, (b, o) in zip(seeds, multi, strict=True)) + "\n")
    print(f"\n# {sum(f['seconds'] for _, _, _, f in runs):.0f} s of replays", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
