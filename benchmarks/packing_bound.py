"""How close FGD and our default policy come to what any placement could allocate.

The packing experiment's curves say which policy packs more, not how much more any policy could:
for each sample (seed) and arrival level this bounds from above the GPU that the tasks arrived so
far could take if a placement could choose which to run, where and in what order
(`bound_model.Relaxation`, a linear program solved with HiGHS; averaged over the events each
point of the curve averages, `seed_bounds`), and prints per trace and level the
mean allocation of `fgd` and `frag-aware`, the bound, each as a share of the bound, and the share of
the gap between FGD and the bound that `frag-aware` closes. Needs the `bound` extra
(`pip install -e '.[bound]'`). Usage:

    .venv/bin/python benchmarks/packing_bound.py [--seeds 42-51] [--workers 2] \\
        [--curves dominance.json] [--pods-dir DIR --traces NAME,...] [--json bound.json]

--curves reads the policies' per-seed curves that `packing_dominance.py --json` (or this script's
--json) wrote instead of simulating them again; --published takes FGD's from the paper's published
curves, which our `fgd` reproduces point for point. --bounds-only and --curves-only compute one half
(--json keeps it), and --bounds reads the bounds back, so the two halves can run apart.

--tightness measures the relaxation against the integer program solved to optimality
(`bound_model.exact`) on samples of a few nodes, with the same arrival protocol (the tasks arrived
by each level's last event):

    .venv/bin/python benchmarks/packing_bound.py --tightness --sample-nodes 8,32 --seeds 42-51
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TypeVar

from bound_model import Relaxation, exact, node_classes, task_counts
from packing_dominance import POINTS, _pods_csv, _seeds

from nomad_gpu.sim.packing import run_seeds
from nomad_gpu.sim.report import published_summary
from nomad_gpu.sim.trace import NODES_CSV, Trace, TraceError, load_trace
from nomad_gpu.sim.workload import build_workload

POLICIES = ("fgd", "frag-aware")
class Unusable(Exception):
    """An input file that lacks what the run asks of it (a usage error: one line, exit 2)."""


GAP_MIN = 0.05
"""Below this many points between FGD and the bound, the share of it closed is left out: the curves
are rounded to 0.01 point, so it would say more about rounding than about placement."""
J = TypeVar("J")
R = TypeVar("R")


def level_events(arrived: Sequence[int], gpus: int, level: int) -> range:
    """The events the curve's point at `level` averages (`sample_percent`): those whose arrived %
    rounds (half to even) to the level, or with none there those at the levels beside it."""
    bins = [round(a / gpus / 10) for a in arrived]
    at = [i for i, b in enumerate(bins) if b == level] or [i for i, b in enumerate(bins) if abs(b - level) <= 1]
    return range(at[0], at[-1] + 1) if at else range(0)


def seed_bounds(trace: Trace, seed: int, levels: Sequence[int], *, patterns: bool = True,
                cuts: bool = True) -> dict[int, float]:
    """The bound (% of the cluster's GPU) on each level's point of the curve for one seed's workload.

    The point averages the allocation after each of the level's events, so the bound does too:
    with B(k) the relaxation's optimum over the first k tasks, solved before the level's first
    event and after its last, the optimum after event i is at most min(B(last), B(first) + what
    arrived in between), since each task added can raise it by its own GPU at most."""
    tasks = build_workload(trace, seed).tasks
    arrived, total = [], 0
    for pod in tasks:
        total += pod.gpu_milli_total
        arrived.append(total)
    lp = Relaxation(node_classes(trace.nodes), task_counts(trace.pods), patterns=patterns, cuts=cuts)
    out = {}
    for x in sorted(levels):
        events = level_events(arrived, trace.gpu_count, x)
        if not events:
            continue
        first, last = events[0], events[-1]
        before = arrived[first - 1] if first else 0
        low, high = lp.solve(task_counts(tasks[:first])), lp.solve(task_counts(tasks[:last + 1]))
        each = [min(high, low + arrived[i] - before) for i in events]
        out[x] = 100.0 * statistics.fmean(each) / trace.gpu_milli_capacity
    return out


def _bound_job(args: tuple[Trace, int, tuple[int, ...], bool, bool]) -> dict[int, float]:
    trace, seed, levels, patterns, cuts = args
    return seed_bounds(trace, seed, levels, patterns=patterns, cuts=cuts)


def _pool_map(fn: Callable[[J], R], jobs: list[J], workers: int) -> list[R]:
    if workers <= 1:
        return [fn(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, jobs))


def _curves(args: argparse.Namespace, name: str, trace: Trace, seeds: list[int],
            workers: int) -> dict[str, dict[int, list[float | None]]] | None:
    if args.bounds_only:
        return None
    if args.curves:
        try:
            raw = json.loads(args.curves.read_text())[name]
            return {p: {s: raw[p][str(s)] for s in seeds} for p in POLICIES if p in args.policies}
        except (OSError, ValueError, KeyError) as e:
            raise Unusable(f"{args.curves}: no {args.policies} curves of {name} for seeds {args.seeds} ({e})") from e
    out = {}
    for policy in args.policies:
        if policy == "fgd" and args.published:
            # our fgd reproduces the paper's curves point for point (docs/packing.md, Validation)
            paper = published_summary(args.published, f"openb_pod_list_{name}", policy)
            if paper is None or not set(seeds) <= set(paper.by_seed):
                raise Unusable(f"{args.published.name} has no {policy} curves of {name} for seeds {args.seeds}")
            out[policy] = {s: list(paper.by_seed[s]) for s in seeds}
            continue
        runs = run_seeds(trace, policy, seeds, workers=workers)
        out[policy] = {r.seed: r.sampled() for r in runs}
    return out


def _bounds(args: argparse.Namespace, name: str, trace: Trace, seeds: list[int], levels: tuple[int, ...],
            workers: int) -> dict[int, dict[int, float]]:
    if args.curves_only:
        return {}
    if args.bounds:
        try:
            raw = json.loads(args.bounds.read_text())[name]["bound"]
            return {s: {x: raw[str(s)][str(x)] for x in levels} for s in seeds}
        except (OSError, ValueError, KeyError) as e:
            raise Unusable(f"{args.bounds}: no bounds of {name} for seeds {args.seeds} at {args.levels} ({e})") from e
    jobs = [(trace, s, levels, not args.pooled, not args.no_cuts) for s in seeds]
    return dict(zip(seeds, _pool_map(_bound_job, jobs, workers), strict=True))


def _pct(x: float) -> str:
    return f"{x:.2f}"


def report(args: argparse.Namespace) -> int:
    seeds = _seeds(args.seeds)
    levels = tuple(int(x) for x in args.levels.split(","))
    workers = max(1, min(len(seeds), args.workers or os.cpu_count() or 1))
    saved: dict[str, dict[str, dict[str, object]]] = {}
    print("| trace | arrived % | fgd | frag-aware | bound | fgd of bound | frag-aware of bound "
          "| gap closed by frag-aware | samples below the bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.traces.split(","):
        trace = load_trace(NODES_CSV, _pods_csv(name, args.pods_dir))
        t0 = time.monotonic()
        curves = _curves(args, name, trace, seeds, workers)
        t1 = time.monotonic()
        bounds = _bounds(args, name, trace, seeds, levels, workers)
        print(f"# {name}: curves {t1 - t0:.0f} s, bounds {time.monotonic() - t1:.0f} s", file=sys.stderr, flush=True)
        saved[name] = {"bound": {str(s): {str(x): b for x, b in by.items()} for s, by in bounds.items()}}
        if curves is not None:
            saved[name].update({p: {str(s): c for s, c in by.items()} for p, by in curves.items()})
        for x in levels:
            if not bounds:
                continue
            b = statistics.fmean(bounds[s][x] for s in seeds)
            if curves is None:
                print(f"| {name} | {x} | | | {_pct(b)} | | | | |", flush=True)
                continue
            mean = {p: statistics.fmean(float(by[s][x] or 0.0) for s in seeds) for p, by in curves.items()}
            # every policy's point is a mean of placements of these tasks: none may exceed the bound
            # (but for the curve's two roundings to 0.01 point)
            below = sum(1 for s in seeds if all((by[s][x] or 0.0) <= bounds[s][x] + 0.01 for by in curves.values()))
            cells = [_pct(mean[p]) if p in mean else "" for p in POLICIES] + [_pct(b)]
            cells += [f"{100 * mean[p] / b:.2f} %" if p in mean else "" for p in POLICIES]
            base, ours = mean.get("fgd"), mean.get("frag-aware")
            closed = ""
            if base is not None and ours is not None:
                closed = f"{100 * (ours - base) / (b - base):+.1f} %" if b - base >= GAP_MIN else "-"
            print(f"| {name} | {x} | " + " | ".join(cells) + f" | {closed} | {below} / {len(seeds)} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(saved))
    return 0


def _tightness_job(args: tuple[Trace, int, int, tuple[int, ...], float]) -> list[str]:
    full, seed, k, levels, limit = args
    nodes = tuple(sorted(random.Random(seed).sample(full.nodes, k), key=lambda n: n.name))
    trace = Trace(nodes, full.pods)
    tasks = build_workload(trace, seed).tasks
    arrived, total = [], 0
    for pod in tasks:
        total += pod.gpu_milli_total
        arrived.append(total)
    lp = Relaxation(node_classes(nodes), task_counts(tasks))
    rows = []
    unit = trace.gpu_milli_capacity / 100.0
    for x in levels:
        events = level_events(arrived, trace.gpu_count, x)
        if not events:
            continue
        counts = task_counts(tasks[:events[-1] + 1])
        bound = lp.solve(counts)
        t0 = time.monotonic()
        best = exact(nodes, counts, time_limit=limit)
        took = time.monotonic() - t0
        proven = "optimal" if best.optimal else f"time limit, gap {(best.bound - best.value) / unit:.2f}"
        rows.append(f"| {k} | {seed} | {trace.gpu_count} | {x} | {bound / unit:.2f} | {best.value / unit:.2f} "
                    f"| {(bound - best.value) / unit:+.2f} | {proven} | {took:.1f} s |")
    return rows


def tightness(args: argparse.Namespace) -> int:
    seeds = _seeds(args.seeds)
    levels = tuple(int(x) for x in args.levels.split(","))
    workers = max(1, args.workers or os.cpu_count() or 1)
    print("| nodes | seed | GPUs | arrived % | LP bound | ILP optimum | LP - ILP (points) | ILP | ILP time |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for name in args.traces.split(","):
        full = load_trace(NODES_CSV, _pods_csv(name, args.pods_dir))
        for k in (int(n) for n in args.sample_nodes.split(",")):
            jobs = [(full, s, k, levels, args.time_limit) for s in seeds]
            print(f"| {name} | | | | | | | | |")
            for rows in _pool_map(_tightness_job, jobs, workers):
                print("\n".join(rows), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="default,gpushare100")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--levels", default=None, help="arrived %% points (default: the dominance table's)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--pods-dir", type=Path, default=None,
                        help="folder of openb_pod_list_<name>.csv for traces that are not bundled")
    parser.add_argument("--curves", type=Path, default=None,
                        help="the policies' curves as packing_dominance.py --json wrote them")
    parser.add_argument("--json", type=Path, default=None, help="write the per-seed bounds here")
    parser.add_argument("--bounds", type=Path, default=None, help="read the bounds a previous --json wrote")
    parser.add_argument("--bounds-only", action="store_true", help="the bounds alone, no policy curves")
    parser.add_argument("--curves-only", action="store_true", help="the policy curves alone (for --json)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="which of fgd,frag-aware to compare")
    parser.add_argument("--published", type=Path, default=None,
                        help="take fgd's curves from the paper's published file (analysis_allo_discrete.csv)")
    parser.add_argument("--pooled", action="store_true", help="weaker bound: shares pooled, no GPU patterns")
    parser.add_argument("--no-cuts", action="store_true", help="weaker bound: without the per-node cuts")
    parser.add_argument("--tightness", action="store_true", help="LP against the ILP on samples of a few nodes")
    parser.add_argument("--sample-nodes", default="8,32")
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds per ILP")
    args = parser.parse_args()
    try:
        for name in args.traces.split(","):
            _pods_csv(name, args.pods_dir)
    except LookupError as e:  # packing_dominance's: a trace it cannot find
        parser.error(str(e))
    args.policies = [p for p in POLICIES if p in args.policies.split(",")]
    if args.levels is None:
        args.levels = "100,130" if args.tightness else ",".join(str(x) for x in POINTS)
    try:
        return tightness(args) if args.tightness else report(args)
    except (Unusable, TraceError) as e:
        parser.error(str(e))


if __name__ == "__main__":
    raise SystemExit(main())
