"""Packing on the openb traces: the paper's baselines against its published rows, and our default.

For each bundled trace (default, gpushare100) and each policy, all ten seeds of the paper's
experiment (tune 1.3, seeds 42-51) through `nomad_gpu.sim.packing`; prints the markdown tables
that docs/packing.md carries (validation, paired comparison, run time) and, with --plots DIR,
draws the figures. Usage:

    .venv/bin/python benchmarks/packing_validation.py --plots docs/img [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from nomad_gpu.sim.packing import run_seeds
from nomad_gpu.sim.report import PackingSummary, paired, published_summary, summarise
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, PUBLISHED_CSV, load_trace

POLICIES = ("random", "best-fit", "fgd", "frag-aware")
SEEDS = list(range(42, 52))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="default,gpushare100")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--plots", type=Path, default=None, help="directory for the figures")
    parser.add_argument("--json", type=Path, default=None, help="write every summary to this file")
    args = parser.parse_args()
    workers = args.workers or os.cpu_count() or 1
    results: dict[str, dict[str, PackingSummary]] = {}
    published: dict[str, dict[str, PackingSummary]] = {}
    seconds: dict[tuple[str, str], float] = {}
    for name in args.traces.split(","):
        trace = load_trace(NODES_CSV, PODS_CSV[name])
        workload = f"openb_pod_list_{name}"
        results[name], published[name] = {}, {}
        for policy in args.policies.split(","):
            t0 = time.monotonic()
            results[name][policy] = summarise(policy, run_seeds(trace, policy, SEEDS, workers=workers))
            seconds[(name, policy)] = time.monotonic() - t0
            pub = published_summary(PUBLISHED_CSV, workload, policy)
            if pub is not None:
                published[name][policy] = pub
            print(f"# {name} {policy}: {seconds[(name, policy)]:.0f} s", file=sys.stderr, flush=True)

    print(f"Validation (GPU allocation %, mean of seeds 42-51, {workers} worker processes):\n")
    print("| trace | policy | ours @100 | published @100 | diff | ours @130 | published @130 | diff "
          "| seeds identical to published |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, by_policy in results.items():
        for policy, ours in by_policy.items():
            pub = published[name].get(policy)
            if pub is None:
                continue
            same = sum(1 for s in SEEDS if list(ours.by_seed[s]) == list(pub.by_seed[s]))
            a100, p100, a130, p130 = ours.at(100), pub.at(100), ours.at(130), pub.at(130)
            assert a100 is not None and p100 is not None and a130 is not None and p130 is not None
            print(f"| {name} | {policy} | {a100:.2f} | {p100:.2f} | {a100 - p100:+.2f} | {a130:.2f} | {p130:.2f} "
                  f"| {a130 - p130:+.2f} | {same}/10 |")

    print("\nOur default against our faithful FGD, paired per seed at 130 % arrived:\n")
    print("| trace | policy | unallocated @130 (ours) | FGD published | FGD ours | paired diff (points) "
          "| wins / losses of 10 | per-seed diffs |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, by_policy in results.items():
        fgd = by_policy.get("fgd")
        fgd_pub = published[name].get("fgd")
        for policy, ours in by_policy.items():
            if policy == "fgd" or fgd is None:
                continue
            pair = paired(fgd, ours)
            diffs = " ".join(f"{d:+.2f}" for _, d in sorted(pair.diffs.items()))
            pub_unalloc = f"{fgd_pub.unallocated_at():.2f}" if fgd_pub is not None else ""
            print(f"| {name} | {policy} | {ours.unallocated_at():.2f} | {pub_unalloc} | {fgd.unallocated_at():.2f} "
                  f"| {pair.mean:+.2f} | {pair.wins} / {pair.losses} | {diffs} |")

    print("\nRun time of the 10-seed run (wall clock):\n")
    print("| trace | " + " | ".join(args.policies.split(",")) + " |")
    print("|---|" + "---:|" * len(args.policies.split(",")))
    for name in results:
        print(f"| {name} | " + " | ".join(f"{seconds[(name, p)]:.0f} s" for p in args.policies.split(",")) + " |")

    if args.plots is not None:
        from nomad_gpu.sim.plots import plot_packing

        args.plots.mkdir(parents=True, exist_ok=True)
        for name, by_policy in results.items():
            path = args.plots / f"packing_{name}.png"
            plot_packing(path, list(by_policy.values()), f"openb {name}: tune 1.3, seeds 42-51",
                         list(published[name].values()))
            print(f"\nwrote {path}", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps({n: {p: s.to_json() for p, s in r.items()} for n, r in results.items()}))
    spread = {n: statistics.pstdev(float(v[130] or 0) for v in r["fgd"].by_seed.values())
              for n, r in results.items() if "fgd" in r}
    print(f"\nFGD seed-to-seed spread at 130 % (population sd): {spread}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
