"""Cohorts on the openb trace: hard quotas, no quotas, and cohorts with borrowing and reclaim (issue 34).

Three teams take turns being busy (docs/cohorts.md says how the tasks are dealt); the same tasks are
replayed through the service's cycle under each mode (nomad_gpu/sim/cohortreplay.py), and the figures the
issue asks for are printed per team and per mode, medians over the seeds where several are given.

    .venv/bin/python benchmarks/cohorts.py [--seeds 42-46] [--speedup 2000] [--node-fraction 0.2] [--tasks N]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from nomad_gpu.sim.cohortreplay import MODES, CohortConfig, run_cohorts
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, Trace, load_trace


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="42-46")
    parser.add_argument("--speedup", type=float, default=CohortConfig.speedup)
    parser.add_argument("--node-fraction", type=float, default=CohortConfig.node_fraction)
    parser.add_argument("--grace", type=float, default=CohortConfig.grace_s, help="victims' checkpoint grace, s")
    parser.add_argument("--trace", default="default", choices=sorted(PODS_CSV))
    parser.add_argument("--tasks", type=int, default=0, help="only the trace's first N tasks (0: all of them)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    trace = load_trace(NODES_CSV, PODS_CSV[args.trace])
    if args.tasks:
        trace = Trace(trace.nodes, trace.pods[:args.tasks])
    runs = []
    for seed in seeds_of(args.seeds):
        config = CohortConfig(speedup=args.speedup, node_fraction=args.node_fraction, seed=seed, grace_s=args.grace)
        for mode in MODES:
            began = time.perf_counter()
            out = run_cohorts(trace, mode, config).to_json()
            out["seconds"] = round(time.perf_counter() - began, 1)
            runs.append(out)
            print(f"seed {seed} {mode}: alloc {out['alloc_pct']}% in {out['seconds']} s", file=sys.stderr)
    report(runs)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


def _median(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"{statistics.median(got):g}" if got else "-"


def report(runs: list[dict]) -> None:
    teams = sorted(runs[0]["teams"])
    print(f"{len({r['seed'] for r in runs})} seed(s), {runs[0]['gpus']} GPUs on seed {runs[0]['seed']}; "
          "medians over seeds")
    print("mode    alloc%  team   wait p50  wait p95  in-quota p95  reclaim p50/p95  reclaims  GPU-h  lost GPU-h"
          "  preempted  never")
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        alloc = _median([r["alloc_pct"] for r in mine])
        for t in teams:
            f = [r["teams"][t] for r in mine]

            def m(key: str, f: list[dict] = f) -> str:
                return _median([x[key] for x in f])
            print(f"{mode:7} {alloc:>6}  {t:6} {m('wait_p50'):>8}  {m('wait_p95'):>8}  {m('within_quota_p95'):>12}  "
                  f"{m('reclaim_p50') + '/' + m('reclaim_p95'):>15}  {m('reclaims'):>8}  {m('gpu_hours'):>5}  "
                  f"{m('lost_gpu_hours'):>10}  {m('preempted'):>9}  {m('never_started'):>5}")
    print("max preemptions of one task:", max(r["max_preemptions"] for r in runs))


if __name__ == "__main__":
    raise SystemExit(main())
