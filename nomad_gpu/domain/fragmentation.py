"""How much of a node's free GPU capacity the expected demand could not use (the FGD measure).

For a distribution of typical asks (shape t with probability p_t), a node's fragmentation is
`F = sum_t p_t * frag_t`, where frag_t is the free milli-GPU that t cannot use on that node: all of
it when t does not fit there at all, else the free milli on GPUs that individually hold less than t
needs. A placement that raises F the least keeps large shapes available. The measure follows
Weng et al., "Beware of Fragmentation" (USENIX ATC '23), generalised to our three GPU modes: a GPU
that cannot serve t (a shared GPU for a whole-GPU ask, say) counts as fragment for t.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, WholeGpus


@dataclass(frozen=True)
class Shape:
    """A typical ask, reduced to what fragmentation depends on."""

    gpus: int
    """Whole GPUs (0 for shares and CPU-only asks)."""
    milli: int
    """Milli-GPU per GPU: 1000 for whole GPUs, the share size for shares, 0 for CPU-only."""
    cpu_mhz: int = 0
    models: frozenset[str] = frozenset()

    @staticmethod
    def of(ask: AllocAsk) -> Shape | None:
        g = ask.gpu
        if g is None:
            return Shape(0, 0, ask.cpu_mhz)
        if isinstance(g, WholeGpus):
            return Shape(g.count, MILLI_PER_GPU, ask.cpu_mhz, g.models)
        if isinstance(g, GpuShare):
            return Shape(1, g.milli, ask.cpu_mhz, g.models)
        return None  # MIG slices are whole instances; they do not fragment GPU milli


@dataclass
class Demand:
    """The typical-ask distribution, with a memo of F per node state (nodes repeat a lot)."""

    shapes: tuple[tuple[Shape, float], ...]
    _memo: dict[tuple[object, ...], float] = field(default_factory=dict, repr=False)

    MEMO_LIMIT = 200_000

    @staticmethod
    def from_shapes(counts: Counter[Shape], coverage: float = 0.95) -> Demand:
        """Most frequent shapes first until they cover `coverage` of asks, then renormalised."""
        total = sum(counts.values())
        if total == 0:
            return Demand(())
        picked: list[tuple[Shape, int]] = []
        covered = 0
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].gpus, kv[0].milli, kv[0].cpu_mhz,
                                                          sorted(kv[0].models)))
        for shape, n in ordered:
            picked.append((shape, n))
            covered += n
            if covered >= coverage * total:
                break
        norm = sum(n for _, n in picked)
        return Demand(tuple((s, n / norm) for s, n in picked))

    @staticmethod
    def from_jobs(jobs: Iterable[JobRequest], coverage: float = 0.95) -> Demand:
        counts: Counter[Shape] = Counter()
        for job in jobs:
            for ask in job.asks:
                shape = Shape.of(ask)
                if shape is not None:
                    counts[shape] += 1
        return Demand.from_shapes(counts, coverage)

    def fragmentation(self, nf: NodeFree) -> float:
        """F for a node as it stands (memoised on its GPU state and free CPU)."""
        state = tuple((g.model, g.mode, nf.gpu_free[gid]) for gid, g in nf.gpus.items())
        key = (state, nf.cpu_free)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        value = self._compute(state, nf.cpu_free)
        if len(self._memo) >= self.MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = value
        return value

    def fragmentation_of(self, state: tuple[tuple[str, object, int], ...], cpu_free: int) -> float:
        key = (state, cpu_free)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._compute(state, cpu_free)
            self._memo[key] = hit
        return hit

    def _compute(self, state: tuple[tuple[str, object, int], ...], cpu_free: int) -> float:
        total_free = sum(free for _, _, free in state)
        if total_free == 0:
            return 0.0
        f = 0.0
        for shape, p in self.shapes:
            f += p * _frag_for(shape, state, cpu_free, total_free)
        return f


def _frag_for(shape: Shape, state: tuple[tuple[str, object, int], ...], cpu_free: int, total: int) -> float:
    if shape.gpus == 0 or cpu_free < shape.cpu_mhz:
        return float(total)
    whole = shape.milli >= MILLI_PER_GPU
    usable = 0
    short = 0
    for model, mode, free in state:
        serves = (not shape.models or model in shape.models) and (
            mode.takes_whole if whole else mode.takes_shares  # type: ignore[attr-defined]
        )
        if serves and free >= shape.milli:
            usable += 1
        else:
            short += free
    return float(short) if usable >= shape.gpus else float(total)
