"""What any placement could allocate: the offline packing problem as linear and integer programs.

The packing experiment places tasks one by one in arrival order, and a task that fits nowhere is
lost. How close a policy comes to the physical limit needs that limit: the most GPU the arrived
tasks could take if the placement could pick which of them to run, where, in any order, under each
node's CPU, memory, GPU count and per-GPU capacity (1000 milli) and each task's model constraint.
That is an integer program too large to solve per sample, so `Relaxation` bounds it from above:

- nodes of identical make-up (CPU, memory, GPU count, model) are one class, their capacities summed,
  and tasks of identical shape are one type; `x[t, n]` counts type-t tasks on class n;
- GPUs are packed by *patterns* (Gilmore-Gomory): a pattern is a multiset of share sizes that fits
  one GPU, `y[n, p]` counts class-n GPUs packed so, whole-GPU tasks and patterns share the class's
  GPUs. The patterns come by column generation, priced exactly by a knapsack over the share sizes,
  so the per-GPU packing is as tight as the bin-packing LP (a 810-milli share and a 470-milli one
  never share a GPU, as they would if the shares were one pool of milli-GPU per class);
- valid cuts on each class: at most k tasks per node of those asking more than 1/(k+1) of its CPU
  or memory (k = 1..3), which the summed capacities alone would not see.

Each of these only drops constraints of the real problem (a placement's per-node counts aggregate
into a feasible point), so its optimum is an upper bound. `exact` states the real problem per node
and per GPU; on samples of a few nodes it solves to optimality and measures how much the relaxation
gives away. Both are solved with HiGHS (`highspy`, the `bound` extra).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

import highspy
import numpy as np

from nomad_gpu.sim.trace import TraceNode, TracePod

MILLI = 1000
INF = highspy.kHighsInf
CUT_LEVELS = (1, 2, 3)
"""k in the "at most k per node of the tasks asking more than 1/(k+1) of a resource" cuts."""
_EPS = 1e-7


@dataclass(frozen=True, order=True)
class NodeClass:
    cpu: int
    mem: int
    gpus: int
    model: str
    count: int


@dataclass(frozen=True, order=True)
class TaskType:
    cpu: int
    mem: int
    whole: int
    """GPUs taken whole (0 for a share)."""
    share: int
    """Milli-GPU of one GPU (0 for whole GPUs)."""
    models: frozenset[str]

    @property
    def value(self) -> int:
        return self.whole * MILLI + self.share

    def fits(self, n: NodeClass) -> bool:
        """Whether one such task fits an empty node of the class."""
        return (self.cpu <= n.cpu and self.mem <= n.mem and max(self.whole, 1) <= n.gpus
                and (not self.models or n.model in self.models))

    @staticmethod
    def of(pod: TracePod) -> TaskType | None:
        """The pod's type, or None for a CPU-only task (it adds no GPU: leaving it out is optimal)."""
        if pod.gpu_milli_total == 0:
            return None
        if pod.num_gpu == 1 and pod.gpu_milli < MILLI:
            return TaskType(pod.cpu_milli, pod.memory_mib, 0, pod.gpu_milli, pod.models)
        return TaskType(pod.cpu_milli, pod.memory_mib, pod.num_gpu, 0, pod.models)


def node_classes(nodes: Iterable[TraceNode]) -> list[NodeClass]:
    counts: dict[tuple[int, int, int, str], int] = {}
    for n in nodes:
        key = (n.cpu_milli, n.memory_mib, n.gpus, n.model)
        counts[key] = counts.get(key, 0) + 1
    return sorted(NodeClass(*key, count=c) for key, c in counts.items() if key[2] > 0)


def task_counts(pods: Iterable[TracePod]) -> dict[TaskType, int]:
    out: dict[TaskType, int] = {}
    for pod in pods:
        t = TaskType.of(pod)
        if t is not None:
            out[t] = out.get(t, 0) + 1
    return out


class _Program:
    """A HiGHS model built row first, then column by column; minimises, so duals keep one sign."""

    def __init__(self) -> None:
        self.h = highspy.Highs()  # type: ignore[no-untyped-call]
        self.h.setOptionValue("output_flag", False)
        self.rows = 0

    def row(self, ub: float, lb: float = -INF) -> int:
        self.h.addRow(lb, ub, 0, np.zeros(0, np.int32), np.zeros(0))
        self.rows += 1
        return self.rows - 1

    def col(self, cost: float, entries: Mapping[int, float], ub: float = INF, integer: bool = False) -> int:
        idx = np.fromiter(entries.keys(), np.int32, len(entries))
        val = np.fromiter(entries.values(), np.float64, len(entries))
        self.h.addCol(cost, 0.0, ub, len(entries), idx, val)
        j = self.h.getNumCol() - 1
        if integer:
            self.h.changeColIntegrality(j, highspy.HighsVarType.kInteger)
        return j

    def constrain(self, entries: Mapping[int, float], *, lb: float = -INF, ub: float = INF) -> None:
        """A row over columns that exist already."""
        idx = np.fromiter(entries.keys(), np.int32, len(entries))
        val = np.fromiter(entries.values(), np.float64, len(entries))
        self.h.addRow(lb, ub, len(entries), idx, val)
        self.rows += 1

    def solve(self) -> float:
        self.h.run()
        status = self.h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"HiGHS: {self.h.modelStatusToString(status)}")
        return float(self.h.getInfo().objective_function_value)


def _cut_rows(p: _Program, n: NodeClass, types: Sequence[TaskType]) -> dict[TaskType, list[int]]:
    """Rows of the "at most k per node above 1/(k+1) of the node" cuts, and the types in each."""
    member: dict[TaskType, list[int]] = {t: [] for t in types}
    for dim, cap in (("cpu", n.cpu), ("mem", n.mem)):
        seen: set[frozenset[TaskType]] = set()
        for k in CUT_LEVELS:
            big = frozenset(t for t in types if getattr(t, dim) * (k + 1) > cap)
            if not big or big in seen:
                continue
            seen.add(big)
            r = p.row(float(k * n.count))
            for t in big:
                member[t].append(r)
    return member


class Relaxation:
    """The LP bound for one cluster and one set of task types; `solve` takes the arrived counts and
    keeps the patterns it generated for the next call (levels and samples of one trace share them)."""

    def __init__(self, classes: Sequence[NodeClass], types: Iterable[TaskType], *,
                 patterns: bool = True, cuts: bool = True) -> None:
        """`patterns` and `cuts` off give the weaker bounds they strengthen (shares pooled as
        milli-GPU per class; no per-node cuts), to measure what each is worth."""
        self.classes = list(classes)
        self.types = sorted(set(types))
        p = self.p = _Program()
        self.avail = {t: p.row(0.0) for t in self.types}
        self.gpu_row: list[int] = []
        self.cover: list[dict[int, int]] = []
        for n in self.classes:
            fit = [t for t in self.types if t.fits(n)]
            p.row(float(n.count * n.cpu))
            p.row(float(n.count * n.mem))
            self.gpu_row.append(p.row(float(n.count * n.gpus)))
            cpu_row, mem_row = self.gpu_row[-1] - 2, self.gpu_row[-1] - 1
            shares = sorted({t.share for t in fit if t.share}) if patterns else []
            cover = {s: p.row(0.0) for s in shares}
            self.cover.append(cover)
            big = _cut_rows(p, n, fit) if cuts else {t: [] for t in fit}
            for t in fit:
                entries = {self.avail[t]: 1.0, cpu_row: float(t.cpu), mem_row: float(t.mem)}
                if t.share and patterns:
                    entries[cover[t.share]] = 1.0
                else:
                    entries[self.gpu_row[-1]] = float(t.value) / MILLI
                entries.update(dict.fromkeys(big[t], 1.0))
                p.col(-float(t.value), entries)
            for s in cover:  # one GPU full of one size: enough to start the column generation
                self._pattern(len(self.cover) - 1, {s: MILLI // s})
        unit = reduce(math.gcd, (t.share for t in self.types if t.share), MILLI)
        self.unit = unit
        self.patterns = 0

    def _pattern(self, ci: int, counts: Mapping[int, int]) -> None:
        entries = {self.gpu_row[ci]: 1.0}
        entries.update({self.cover[ci][s]: -float(a) for s, a in counts.items() if a})
        self.p.col(0.0, entries)

    def solve(self, counts: Mapping[TaskType, int]) -> float:
        """The bound in milli-GPU for these arrived tasks (types not given arrived none)."""
        h = self.p.h
        for t, r in self.avail.items():
            h.changeRowBounds(r, -INF, float(counts.get(t, 0)))
        unknown = set(counts) - set(self.avail)
        if any(counts[t] for t in unknown):
            raise ValueError(f"{len(unknown)} task type(s) the relaxation was not built with")
        while True:
            value = -self.p.solve()
            dual = h.getSolution().row_dual
            added = 0
            for ci, cover in enumerate(self.cover):
                if not cover:
                    continue
                price = {s: -dual[r] for s, r in cover.items()}
                best, pattern = _knapsack(price, self.unit)
                if best > -dual[self.gpu_row[ci]] + _EPS * max(1.0, best):
                    self._pattern(ci, pattern)
                    added += 1
            self.patterns += added
            if not added:
                return value


def _knapsack(price: Mapping[int, float], unit: int) -> tuple[float, dict[int, int]]:
    """The most valuable multiset of share sizes that fits one GPU (unbounded knapsack by dynamic
    programming over the capacity in steps of `unit`)."""
    cap = MILLI // unit
    best = np.zeros(cap + 1)
    pick = np.full(cap + 1, -1, np.int64)
    sizes = [(s // unit, s, v) for s, v in price.items() if v > 0]
    for c in range(1, cap + 1):
        best[c], pick[c] = best[c - 1], -1
        for w, s, v in sizes:
            if w <= c and best[c - w] + v > best[c]:
                best[c], pick[c] = best[c - w] + v, s
    out: dict[int, int] = {}
    c = cap
    while c > 0:
        s = int(pick[c])
        if s < 0:
            c -= 1
        else:
            out[s] = out.get(s, 0) + 1
            c -= s // unit
    return float(best[cap]), out


@dataclass(frozen=True)
class Exact:
    value: float
    """The best placement found, in milli-GPU."""
    bound: float
    """HiGHS's proven upper bound (equal to `value` when `optimal`)."""
    optimal: bool


def maximal_patterns(sizes: Iterable[int]) -> list[dict[int, int]]:
    """Every multiset of these share sizes that fits one GPU and has no room for one more: any
    feasible GPU's shares are a subset of one of them."""
    order = sorted(set(sizes), reverse=True)
    out: list[dict[int, int]] = []

    def extend(i: int, left: int, chosen: dict[int, int]) -> None:
        if i == len(order):
            if not order or left < order[-1]:
                out.append({s: a for s, a in chosen.items() if a})
            return
        for a in range(left // order[i], -1, -1):
            chosen[order[i]] = a
            extend(i + 1, left - a * order[i], chosen)
        chosen.pop(order[i], None)

    extend(0, MILLI, {})
    return out


def exact(nodes: Sequence[TraceNode], counts: Mapping[TaskType, int], *, time_limit: float = 60.0) -> Exact:
    """The offline problem itself, node by node, as an integer program: `x[t, i]` tasks of type t
    on node i, and `y[i, p]` GPUs of node i packed by pattern p (every maximal pattern of the share
    sizes, so no packing is left out); a node's whole GPUs and patterned GPUs are at most its GPU
    count and its shares of each size at most what its patterns hold. Identical nodes are ordered
    by the value they take (any placement can be so permuted) to spare the solver their symmetry."""
    p = _Program()
    p.h.setOptionValue("time_limit", float(time_limit))
    p.h.setOptionValue("mip_rel_gap", 0.0)
    types = sorted(t for t, k in counts.items() if k > 0)
    placed: dict[TaskType, list[int]] = {t: [] for t in types}
    patterns: dict[tuple[int, ...], list[dict[int, int]]] = {}
    previous: tuple[tuple[int, int, int, str], dict[int, float]] | None = None
    for node in nodes:
        cls = NodeClass(node.cpu_milli, node.memory_mib, node.gpus, node.model, 1)
        fit = [t for t in types if t.fits(cls)]
        if not fit:
            continue
        x = {t: p.col(-float(t.value), {}, integer=True) for t in fit}
        for t, j in x.items():
            placed[t].append(j)
        p.constrain({x[t]: float(t.cpu) for t in fit}, ub=float(node.cpu_milli))
        p.constrain({x[t]: float(t.mem) for t in fit}, ub=float(node.memory_mib))
        sizes = tuple(sorted({t.share for t in fit if t.share}))
        pats = patterns.setdefault(sizes, maximal_patterns(sizes)) if sizes else []
        y = [p.col(0.0, {}, ub=float(node.gpus), integer=True) for _ in pats]
        p.constrain({**{x[t]: float(t.whole) for t in fit if t.whole}, **dict.fromkeys(y, 1.0)},
                    ub=float(node.gpus))
        for s in sizes:
            held = {j: -float(pat[s]) for j, pat in zip(y, pats, strict=True) if pat.get(s)}
            p.constrain({**{x[t]: 1.0 for t in fit if t.share == s}, **held}, ub=0.0)
        key = (node.cpu_milli, node.memory_mib, node.gpus, node.model)
        value = {x[t]: float(t.value) for t in fit}
        if previous is not None and previous[0] == key:
            p.constrain({**previous[1], **{j: -v for j, v in value.items()}}, lb=0.0)
        previous = (key, value)
    for t in types:
        if placed[t]:
            p.constrain(dict.fromkeys(placed[t], 1.0), ub=float(counts[t]))
    p.h.run()
    status = p.h.getModelStatus()
    if status not in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kTimeLimit):
        raise RuntimeError(f"HiGHS: {p.h.modelStatusToString(status)}")
    info = p.h.getInfo()
    return Exact(-float(info.objective_function_value), -float(info.mip_dual_bound),
                 status == highspy.HighsModelStatus.kOptimal)
