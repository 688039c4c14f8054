"""Our default policy against FGD over the whole load curve, not only at saturation.

For each bundled trace, the paper's arrival-only experiment with `fgd` and `frag-aware` on the
same seeds (paired workloads and node priorities); prints the dominance table docs/packing.md
carries (worst and best mean difference over an arrived range, and where) and a row of the
difference at chosen points, and with --plot draws the difference curves. Usage:

    .venv/bin/python benchmarks/packing_dominance.py --plot docs/img/packing_difference.png \
        --json dominance.json [--seeds 42-51] [--workers 2]

--from-json reads the curves a previous run wrote instead of simulating again. --pods-dir reads
traces that are not bundled (the paper's other traces of the family, `openb_pod_list_<name>.csv`)
from a folder, to check that the policy generalises beyond the two it was tuned on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from nomad_gpu.sim.packing import run_seeds
from nomad_gpu.sim.report import PackingSummary, dominance, paired, summarise
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, load_trace

BASE, OURS = "fgd", "frag-aware"
POINTS = (50, 60, 70, 80, 85, 90, 93, 95, 96, 97, 98, 100, 110, 120, 130)
TOLERANCE = 0.05
"""The goal: never more than this many points below FGD."""


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def _load(path: Path) -> dict[str, dict[str, PackingSummary]]:
    raw = json.loads(path.read_text())
    return {name: {p: PackingSummary(p, {int(s): c for s, c in curves.items()}) for p, curves in by.items()}
            for name, by in raw.items()}


def _pods_csv(name: str, folder: Path | None) -> Path:
    if name in PODS_CSV:
        return PODS_CSV[name]
    if folder is None:
        raise LookupError(f"trace {name!r} is not bundled ({', '.join(PODS_CSV)}); give --pods-dir")
    path = folder / f"openb_pod_list_{name}.csv"
    if not path.is_file():
        raise LookupError(f"no {path.name} in {folder}")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="default,gpushare100")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--first", type=int, default=50)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the per-seed curves here")
    parser.add_argument("--from-json", type=Path, default=None, help="read the curves instead of simulating")
    parser.add_argument("--pods-dir", type=Path, default=None,
                        help="folder of openb_pod_list_<name>.csv for traces that are not bundled")
    args = parser.parse_args()
    if args.from_json:
        results = _load(args.from_json)
    else:
        try:
            pods = {name: _pods_csv(name, args.pods_dir) for name in args.traces.split(",")}
        except LookupError as e:
            parser.error(str(e))
        workers = args.workers or os.cpu_count() or 1
        results = {}
        for name in args.traces.split(","):
            trace = load_trace(NODES_CSV, pods[name])
            results[name] = {}
            for policy in (BASE, OURS):
                t0 = time.monotonic()
                runs = run_seeds(trace, policy, _seeds(args.seeds), workers=workers)
                results[name][policy] = summarise(policy, runs)
                print(f"# {name} {policy}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps({name: {p: {str(s): list(c) for s, c in summ.by_seed.items()}
                                                for p, summ in by.items()} for name, by in results.items()}))

    print(f"{OURS} minus {BASE}, mean GPU allocation (points), arrived {args.first}-130 %:\n")
    print("| trace | seeds | worst (arrived %) | best (arrived %) | at 130 % | wins / losses @130 "
          f"| never more than {TOLERANCE} below |")
    print("|---|---:|---:|---:|---:|---:|---|")
    dom = {}
    for name, by in results.items():
        d = dom[name] = dominance(by[BASE], by[OURS], args.first)
        (wx, wd), (bx, bd) = d.worst, d.best
        at = paired(by[BASE], by[OURS])
        print(f"| {name} | {len(by[BASE].seeds)} | {wd:+.2f} ({wx} %) | {bd:+.2f} ({bx} %) | {d.diffs[130]:+.2f} "
              f"| {at.wins} / {at.losses} | {'yes' if d.holds(TOLERANCE) else 'no'} |")
    print("\n| trace | " + " | ".join(f"{x} %" for x in POINTS) + " |")
    print("|---|" + "---:|" * len(POINTS))
    for name, d in dom.items():
        print(f"| {name} | " + " | ".join(f"{d.diffs[x]:+.2f}" for x in POINTS) + " |")
    if args.plot:
        from nomad_gpu.sim.plots import plot_difference

        plot_difference(args.plot, [(name, sorted(d.diffs.items())) for name, d in dom.items()],
                        f"{OURS} minus {BASE}: mean GPU allocation", TOLERANCE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
