"""Where FGD and `frag-aware` part ways in the packing experiment, traced on one seed.

The dominance tables say by how much one policy trails the other; these reports say where. Each runs
the experiment of `nomad-gpu simulate packing` for both policies through `sim.packing.place_seed`,
watching every decision before it is committed:

- `failed`: the GPU of failed tasks by task shape (GPUs x milli, CPU cores, models allowed) at each
  arrived level, rows where the two differ, largest difference first;
- `whole`: nodes with `--gpus` GPUs by how many of them are free whole, at each arrived level;
- `landing`: the GPU of tasks free to run on any model that each policy put on nodes of `--models`
  up to `--upto` % arrived, split by whether FGD's own integer score preferred such a node outright
  or tied it with the best node of other models (where `frag-aware`'s keys below the score decide);
- `demand`: the GPU the seed's workload asks for, by the models it is bound to, against the capacity
  of each model.

    .venv/bin/python benchmarks/packing_why.py failed --trace gpuspec33 --pods-dir DIR --seed 42 --levels 53,100
    .venv/bin/python benchmarks/packing_why.py landing --trace gpuspec33 --pods-dir DIR --seed 42 \\
        --upto 30 --models V100M16,V100M32
    .venv/bin/python benchmarks/packing_why.py whole --trace multigpu30 --pods-dir DIR --seed 43 --levels 20,30,96
    .venv/bin/python benchmarks/packing_why.py demand --trace gpuspec33 --pods-dir DIR --seed 42
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from packing_dominance import _pods_csv

from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.scoring import best_score
from nomad_gpu.sim.packing import Decision, place_seed
from nomad_gpu.sim.trace import NODES_CSV, Trace, TracePod, load_trace
from nomad_gpu.sim.workload import build_workload

POLICIES = ("fgd", "frag-aware")
S = TypeVar("S")


class _Enough(Exception):
    """Raised by an observer once it has seen what it needs: the rest of the run is not played."""


def shape_of(pod: TracePod) -> str:
    models = pod.spec or "any model"
    return f"{pod.num_gpu} x {pod.gpu_milli} milli, {pod.cpu_milli // 1000} cores, {models}"


def _watch(trace: Trace, policy: str, seed: int, observer: Callable[[Decision], None]) -> None:
    try:
        place_seed(trace, policy, seed, observe=observer)
    except _Enough:
        pass


def _at_levels(trace: Trace, levels: Sequence[int], snap: Callable[[Decision], S],
               each: Callable[[Decision], None] | None = None) -> tuple[dict[int, S], Callable[[Decision], None]]:
    """An observer calling `snap` at the first decision whose arrived % reaches each level."""
    got: dict[int, S] = {}
    todo = sorted(levels)

    def observe(d: Decision) -> None:
        if each is not None:
            each(d)
        while todo and d.arrived_milli * 100 >= todo[0] * trace.gpu_milli_capacity:
            got[todo.pop(0)] = snap(d)
        if not todo:
            raise _Enough

    return got, observe


def failed(trace: Trace, seed: int, levels: Sequence[int]) -> dict[str, dict[int, Counter[str]]]:
    """Failed GPU (milli) by shape at each level, per policy."""
    out: dict[str, dict[int, Counter[str]]] = {}
    for policy in POLICIES:
        lost: Counter[str] = Counter()

        def count(d: Decision, lost: Counter[str] = lost) -> None:
            if d.placed is None:
                lost[shape_of(d.pod)] += d.pod.gpu_milli_total

        got, observe = _at_levels(trace, levels, lambda d, lost=lost: Counter(lost), count)
        _watch(trace, policy, seed, observe)
        out[policy] = got
    return out


def whole_free(nf: NodeFree) -> int:
    return sum(len(ids) for ids in nf.whole_free().values())


def whole(trace: Trace, seed: int, levels: Sequence[int], gpus: int) -> dict[str, dict[int, Counter[int]]]:
    """Nodes with `gpus` GPUs by their whole free GPUs, at each level, per policy."""
    def snap(d: Decision) -> Counter[int]:
        return Counter(whole_free(nf) for nf in d.ledger.index.nodes() if len(nf.gpus) == gpus)

    out: dict[str, dict[int, Counter[int]]] = {}
    for policy in POLICIES:
        got, observe = _at_levels(trace, levels, snap)
        _watch(trace, policy, seed, observe)
        out[policy] = got
    return out


def landing(trace: Trace, seed: int, upto: int, models: set[str]) -> dict[str, Counter[str]]:
    """GPU (milli) of tasks free to run anywhere placed on nodes of `models` by `upto` % arrived, by
    how FGD's integer score ranked the chosen node against the best node of other models."""
    asks = {pod.name: pod.to_ask() for pod in trace.pods}
    fgd = get_policy("fgd")  # its score is FGD's integer score, whichever policy places
    out: dict[str, Counter[str]] = {}
    for policy in POLICIES:
        tally: Counter[str] = Counter()

        def observe(d: Decision, tally: Counter[str] = tally) -> None:
            if d.arrived_milli * 100 > upto * trace.gpu_milli_capacity:
                raise _Enough
            if d.placed is None or not d.pod.num_gpu or d.pod.models:
                return
            index, ask = d.ledger.index, asks[d.pod.name]
            chosen = index.get(d.placed[0].node)
            if chosen is None or not chosen.node.gpu_models() & models:
                return
            mine = best_score(fgd, chosen, ask, d.demand)
            others = [s for nf in index.nodes()
                      if not nf.node.gpu_models() & models and nf.cpu_free >= ask.cpu_mhz
                      and nf.mem_free >= ask.memory_mb and (s := best_score(fgd, nf, ask, d.demand)) is not None]
            best = max(others, default=None)
            kind = ("no other model had room" if best is None or mine is None else
                    "outright" if mine > best else "within a tie" if mine == best else "below another")
            tally[kind] += d.pod.gpu_milli_total

        _watch(trace, policy, seed, observe)
        out[policy] = tally
    return out


def demand(trace: Trace, seed: int) -> tuple[Counter[str], Counter[str]]:
    """GPU (milli) asked by the seed's workload by the models it is bound to, and GPUs per model."""
    asked: Counter[str] = Counter()
    for pod in build_workload(trace, seed).tasks:
        if pod.num_gpu:
            asked["|".join(sorted(pod.models)) or "any model"] += pod.gpu_milli_total
    capacity: Counter[str] = Counter()
    for node in trace.nodes:
        if node.gpus:
            capacity[node.model] += node.gpus
    return asked, capacity


def _gpus(milli: int) -> str:
    return f"{milli / MILLI_PER_GPU:,.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", choices=("failed", "whole", "landing", "demand"))
    parser.add_argument("--trace", default="default")
    parser.add_argument("--pods-dir", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--levels", default="53,100", help="arrived %% levels (failed, whole)")
    parser.add_argument("--gpus", type=int, default=8, help="node size (whole)")
    parser.add_argument("--upto", type=int, default=30, help="arrived %% (landing)")
    parser.add_argument("--models", default="V100M16,V100M32", help="GPU models (landing)")
    parser.add_argument("--rows", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        trace = load_trace(NODES_CSV, _pods_csv(args.trace, args.pods_dir))
        levels = [int(x) for x in args.levels.split(",")]
    except (LookupError, ValueError) as e:
        parser.error(str(e))
    if args.report == "failed":
        lost = failed(trace, args.seed, levels)
        for x in levels:
            a, b = (lost[p].get(x, Counter()) for p in POLICIES)
            print(f"\n{x} % arrived: GPUs failed (fgd / frag-aware), shapes where they differ")
            for shape in sorted(set(a) | set(b), key=lambda s: (-abs(b[s] - a[s]), s))[:args.rows]:
                if a[shape] != b[shape]:
                    print(f"  {shape}: {_gpus(a[shape])} / {_gpus(b[shape])}")
    elif args.report == "whole":
        nodes = whole(trace, args.seed, levels, args.gpus)
        for x in levels:
            print(f"\n{x} % arrived: {args.gpus}-GPU nodes by whole GPUs free")
            for p in POLICIES:
                c = nodes[p].get(x, Counter())
                print(f"  {p:10} " + " ".join(f"{k}:{c[k]}" for k in sorted(c)))
    elif args.report == "landing":
        got = landing(trace, args.seed, args.upto, set(args.models.split(",")))
        print(f"GPUs of tasks free to run anywhere on {args.models} nodes by {args.upto} % arrived")
        for p in POLICIES:
            print(f"  {p:10} " + ", ".join(f"{k} {_gpus(v)}" for k, v in sorted(got[p].items())))
    else:
        asked, capacity = demand(trace, args.seed)
        total = sum(asked.values())
        print("models             GPUs asked   share   GPUs of each model in the cluster: "
              + ", ".join(f"{m} {n:,}" for m, n in sorted(capacity.items())))
        for models, milli in asked.most_common(args.rows):
            print(f"  {models:40} {_gpus(milli):>9} {100 * milli / total:6.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
