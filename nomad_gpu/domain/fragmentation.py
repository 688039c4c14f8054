"""How much of a node's free GPU capacity the expected demand could not use (the FGD measure).

For a distribution of typical asks (shape t with probability p_t), a node's fragmentation is
`F = sum_t p_t * frag_t`, where frag_t is the free milli-GPU that t cannot use on that node: all of
it when t does not fit there at all (too few GPUs with enough free, not enough CPU left, a model it
may not run on, or t asks for no GPU), else the free milli on GPUs that individually hold less than
t needs. A placement that raises F the least keeps large shapes available. The measure follows
Weng et al., "Beware of Fragmentation" (USENIX ATC '23), generalised to our three GPU modes: a GPU
that cannot serve t (a shared GPU for a whole-GPU ask, say) counts as fragment for t.

The sum is accumulated exactly as the paper's simulator does (per-category buckets, added in
typical-shape order, then summed), and the typical shapes are chosen and weighted as it does, so
that integer-truncated FGD scores computed from F tie and break ties exactly as published.

`Demand.stranded` is a finer, CPU-aware companion: for each typical shape, the free GPU capacity
that would stay idle if the node were filled with copies of that shape, as many as its GPUs *and*
its free CPU allow. F calls a GPU with room for t "usable" however little CPU is left to run t
beside it; the stranded measure counts what CPU (and leftovers smaller than t) leave unusable.

`Demand.large` keeps the shapes whose homes are few for reasons F's expectation hides: every
multi-GPU shape (rare ones F's typical set leaves out; common ones, whose room F sees only within
its integer ties) and every typical shape bound to named GPU models. Each fails, or waits, whole
when no node has that many GPUs of its models free and the CPU beside them; `large_capacity`
measures a node's room for them, and `scarce_on` weights each by its frequency over the room the
cluster has left for it, so that the room of a shape running out weighs more as it runs out.
In a queue a large task that finds no room waits (and is held for) rather than fails, so
`needed_now` keeps a large shape only while the room for it is all spoken for by waiting tasks.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.gpustate import TAKES_SHARES, TAKES_WHOLE, GpuState, gpu_kind, gpu_state
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.largeshapes import RoomLeft, copies, large_shapes, may_be_large, room_levels, whole_by_model
from nomad_gpu.domain.requests import AllocAsk, JobRequest

__all__ = ["TAKES_SHARES", "TAKES_WHOLE", "Demand", "GpuState", "RoomLeft", "Shape", "gpu_kind", "gpu_state"]

# the paper's categories; F sums every bucket but "satisfied"
_LACK_BOTH, _LACK_GPU, _SATISFIED, _LACK_CPU, _CPU_FITS, _CPU_SHORT, _NO_ACCESS = range(7)
_COUNTED = (_LACK_BOTH, _LACK_GPU, _LACK_CPU, _CPU_FITS, _CPU_SHORT, _NO_ACCESS)


@dataclass(frozen=True)
class Shape:
    """A typical ask, reduced to what fragmentation depends on."""

    gpus: int
    """GPUs it needs (1 for a share, 0 for CPU-only asks)."""
    milli: int
    """Milli-GPU per GPU: 1000 for whole GPUs, the share size for shares, 0 for CPU-only."""
    cpu_mhz: int = 0
    models: frozenset[str] = frozenset()
    label: str = ""
    """How the source spelled the model constraint, when shapes spelled differently must be counted
    apart (the paper keys typical tasks by the raw model string); empty: by `models` alone."""

    @staticmethod
    def of(ask: AllocAsk) -> Shape | None:
        g = ask.gpu
        if g is None:
            return Shape(0, 0, ask.cpu_mhz)
        dims = g.fragment_shape()  # None: a kind that does not take GPU milli (MIG instances)
        return None if dims is None else Shape(dims[0], dims[1], ask.cpu_mhz, g.models)

    def order_key(self) -> tuple[int, int, int, str]:
        """The paper's order among equally frequent shapes: CPU, milli, GPU count, model list."""
        return (self.cpu_mhz, self.milli, self.gpus, self.label or "|".join(sorted(self.models)))


@dataclass
class Demand:
    """The typical-ask distribution, with a memo of F per node state (nodes repeat a lot)."""

    shapes: tuple[tuple[Shape, float], ...]
    large: tuple[tuple[Shape, float], ...] = ()
    """Shapes with few homes, each with its frequency among them: every multi-GPU shape (typical
    or not) and every typical shape bound to named GPU models. Each one that finds no node with
    that many free GPUs of its models fails (or waits) whole. See `large_capacity`, `largeshapes.large_shapes`."""
    large_freq: tuple[tuple[Shape, float], ...] = ()
    """The large shapes' frequencies before `scarce_on` weighed them by room (empty: `large` is that)."""
    _memo: dict[tuple[GpuState, int], float] = field(default_factory=dict, repr=False)
    _stranded_memo: dict[tuple[GpuState, int], float] = field(default_factory=dict, repr=False)
    _large_memo: dict[tuple[GpuState, int], float] = field(default_factory=dict, repr=False)
    _needed: dict[tuple[Shape, ...], Demand] = field(default_factory=dict, repr=False)
    _weighed: dict[tuple[int, ...], Demand] = field(default_factory=dict, repr=False)
    _room_memo: dict[tuple[GpuState, int], tuple[int, ...]] = field(default_factory=dict, repr=False)
    _cpu_levels: tuple[int, ...] = field(default=(), init=False, repr=False)

    MEMO_LIMIT = 200_000
    WEIGHED_LIMIT = 16

    def __post_init__(self) -> None:
        # F depends on free CPU only through "at least shape t's CPU" tests: memoise per level
        self._cpu_levels = tuple(sorted({s.cpu_mhz for s, _ in self.shapes}))

    @staticmethod
    def from_shapes(counts: Counter[Shape], coverage: float = 0.95) -> Demand:
        """Most frequent shapes first until they cover `coverage` of asks, then renormalised.

        Ties in frequency go to the larger shape (CPU, then milli, GPU count, models); the
        arithmetic of the weights follows the paper's simulator to the last bit.
        """
        total = float(sum(counts.values()))
        if total == 0:
            return Demand(())
        ordered = sorted(counts.items(), key=lambda kv: kv[0].order_key(), reverse=True)
        ordered.sort(key=lambda kv: kv[1], reverse=True)  # stable: frequency first
        expected = coverage * total
        picked: list[tuple[Shape, float]] = []
        covered = 0.0
        for shape, n in ordered:
            if covered >= expected:
                break
            covered += n
            picked.append((shape, n / total))
        large = large_shapes(ordered, len(picked))
        if len(picked) == len(ordered):
            return Demand(tuple(picked), large)
        share = covered / total
        return Demand(tuple((s, p / share) for s, p in picked), large)

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
        return self.fragmentation_of(gpu_state(nf), nf.cpu_free)

    def fragmentation_of(self, state: GpuState, cpu_free: int) -> float:
        key = (state, bisect_right(self._cpu_levels, cpu_free))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._compute(state, cpu_free)
            if len(self._memo) >= self.MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = hit
        return hit

    def stranded(self, state: GpuState, cpu_free: int) -> float:
        """Expected free milli-GPU left unusable: sum over typical shapes t of p_t times the node's
        free GPU milli minus what the most copies of t that fit (by GPUs and by CPU) would use."""
        key = (state, cpu_free)
        hit = self._stranded_memo.get(key)
        if hit is None:
            hit = self._stranded(state, cpu_free)
            if len(self._stranded_memo) >= self.MEMO_LIMIT:
                self._stranded_memo.clear()
            self._stranded_memo[key] = hit
        return hit

    def _stranded(self, state: GpuState, cpu_free: int) -> float:
        total = sum(free for _, _, free in state)
        if total == 0:
            return 0.0
        out = 0.0
        for shape, p in self.shapes:
            if shape.milli == 0:
                out += p * total  # work without a GPU uses none of it
                continue
            need = TAKES_WHOLE if shape.milli >= MILLI_PER_GPU else TAKES_SHARES
            fits_gpu = 0
            for model, kind, free in state:
                if kind & need and (not shape.models or model in shape.models):
                    fits_gpu += free // shape.milli
            if need == TAKES_WHOLE:
                fits_gpu //= shape.gpus
            fits = min(fits_gpu, cpu_free // shape.cpu_mhz) if shape.cpu_mhz > 0 else fits_gpu
            out += p * (total - max(0, fits) * shape.gpus * shape.milli)
        return out

    def large_capacity(self, state: GpuState, cpu_free: int) -> float:
        """The node's room for large shapes (`large`): copies of each that fit by whole free GPUs
        of an allowed model and by CPU, weighted as `large` is; 0 with no large shapes."""
        if not self.large:
            return 0.0
        key = (state, cpu_free)
        hit = self._large_memo.get(key)
        if hit is None:
            whole = whole_by_model(state)  # counted once for all the shapes
            hit = 0.0
            for shape, weight in self.large:
                fits = copies(shape, whole, cpu_free)
                if fits:
                    hit += weight * fits
            if len(self._large_memo) >= self.MEMO_LIMIT:
                self._large_memo.clear()
            self._large_memo[key] = hit
        return hit

    @property
    def frequencies(self) -> tuple[tuple[Shape, float], ...]:
        """The large shapes with their frequencies, however this demand was weighed: the order
        `room_of`, `weighed` and `RoomLeft` count room in."""
        return self.large_freq or self.large

    def scarce_on(self, hosts: Iterable[NodeFree]) -> Demand:
        """This demand with each large shape weighted by its frequency over the room the `hosts`
        have left for it as they stand (`room_of`, summed). Losing a copy of room costs more the
        less of it is left: a shape whose few homes are filling up (the GPUs of a scarce model, the
        CPU-rich nodes a whole-node task needs) is protected before it runs out, not after. The
        room is rounded down to a power of two (`room_levels`), so the weights move only when a
        shape's room halves or doubles and a caller may keep its scores until then. The scarcest
        shape weighs 1; shapes with no room left are dropped (there is none to lose)."""
        if not self.frequencies:
            return self
        room = [0] * len(self.frequencies)
        for nf in hosts:
            if nf.offered:
                for i, copies in enumerate(self.room_of(nf)):
                    room[i] += copies
        return self.weighed(room)

    def room_of(self, nf: NodeFree) -> tuple[int, ...]:
        """Copies of each large shape (in `frequencies` order) that `nf` could take as it stands."""
        freq = self.frequencies
        key = (nf.gpu_state(), nf.cpu_free)
        hit = self._room_memo.get(key)
        if hit is None:
            whole = whole_by_model(key[0])
            hit = tuple(copies(shape, whole, key[1]) for shape, _ in freq) if whole[1] else (0,) * len(freq)
            if len(self._room_memo) >= self.MEMO_LIMIT:
                self._room_memo.clear()
            self._room_memo[key] = hit
        return hit

    room_levels = staticmethod(room_levels)

    def weighed(self, room: Sequence[int]) -> Demand:
        """`scarce_on` for a room already counted (per large shape, in `frequencies` order): one
        object per choice of levels, sharing this demand's memos of F and of stranded capacity."""
        freq = self.frequencies
        levels = self.room_levels(room)
        hit = self._weighed.get(levels)
        if hit is None:
            scarce = [(s, p / (1 << (level - 1))) for (s, p), level in zip(freq, levels, strict=True) if level]
            top = max((w for _, w in scarce), default=1.0)
            hit = Demand(self.shapes, tuple((s, w / top) for s, w in scarce), freq)
            hit._memo, hit._stranded_memo, hit._room_memo = self._memo, self._stranded_memo, self._room_memo
            hit._weighed = self._weighed
            if len(self._weighed) >= self.WEIGHED_LIMIT:
                self._weighed.clear()  # each keeps a memo of room by node state; old levels rarely return
            self._weighed[levels] = hit
        return hit

    def needed_now(self, hosts: Iterable[NodeFree], waiting: Iterable[AllocAsk]) -> Demand:
        """This demand keeping only the large shapes whose room is scarce now: some of the `hosts`
        (the nodes as they stand) can take a copy, but no more copies than there are `waiting` asks
        of that shape. Room beyond the waiting tasks protects only tasks that may never come, and
        keeping it sends CPU-heavy work to nodes whose GPUs it strands; a task that arrives to no
        room waits and, once starving, gets nodes held for it. The result shares this demand's
        memos of F and of stranded capacity (they do not depend on the large shapes)."""
        if not self.large:
            return self
        shapes = {s for s, _ in self.large}
        smallest = min(s.gpus for s in shapes)
        bound = any(s.models for s in shapes)
        asked: Counter[Shape] = Counter()
        for ask in waiting:
            if may_be_large(ask.gpu, smallest, bound):
                shape = Shape.of(ask)
                if shape in shapes:
                    asked[shape] += 1
        wanted = [(s, w) for s, w in self.large if asked[s]]
        if not wanted:
            return self._keeping(())
        need = [asked[s] for s, _ in wanted]
        room = [0] * len(wanted)
        short = list(range(len(wanted)))  # shapes whose room is not yet beyond their waiting tasks
        counted: dict[GpuState, tuple[Counter[str], int]] = {}  # many nodes share a state
        for nf in hosts:
            if not nf.offered:
                continue
            state = nf.gpu_state()
            whole = counted.get(state)
            if whole is None:
                whole = counted[state] = whole_by_model(state)
            if not whole[1]:
                continue  # no whole GPU free: no copy of any shape
            for i in short:
                room[i] += copies(wanted[i][0], whole, nf.cpu_free)
            short = [i for i in short if room[i] <= need[i]]
            if not short:
                break  # room to spare for every waiting shape: none is kept
        return self._keeping(tuple(wanted[i] for i in range(len(wanted)) if 0 < room[i] <= need[i]))

    def _keeping(self, kept: tuple[tuple[Shape, float], ...]) -> Demand:
        """This demand with only the large shapes `kept`, one object per choice of them."""
        if len(kept) == len(self.large):
            return self
        key = tuple(s for s, _ in kept)
        hit = self._needed.get(key)
        if hit is None:
            hit = Demand(self.shapes, kept)
            hit._memo, hit._stranded_memo = self._memo, self._stranded_memo
            self._needed[key] = hit
        return hit

    def _compute(self, state: GpuState, cpu_free: int) -> float:
        frees = [free for _, _, free in state]
        total = sum(frees)
        if total == 0:
            return 0.0
        first_model = state[0][0]
        uniform = all(kind == TAKES_WHOLE | TAKES_SHARES and model == first_model for model, kind, _ in state)
        ordered = sorted(frees)
        below = [0, *accumulate(ordered)]  # below[k]: milli on the k emptiest GPUs
        buckets = [0.0] * 7
        for shape, p in self.shapes:
            if uniform and shape.milli and (not shape.models or first_model in shape.models):
                k = bisect_left(ordered, shape.milli)  # GPUs with less than the shape needs
                kind = _SATISFIED if len(ordered) - k >= shape.gpus else _LACK_GPU
                if cpu_free < shape.cpu_mhz:
                    kind = _LACK_CPU if kind == _SATISFIED else _LACK_BOTH
                short = below[k]
            else:
                kind, short = _classify(shape, state, cpu_free)
            if kind == _SATISFIED:
                buckets[_LACK_GPU] += p * float(short)
                buckets[_SATISFIED] += p * float(total - short)
            else:
                buckets[kind] += p * float(total)
        f = 0.0
        for kind in _COUNTED:
            f += buckets[kind]
        return f


def _classify(shape: Shape, state: GpuState, cpu_free: int) -> tuple[int, int]:
    """The paper's category of (node, typical shape), and for "satisfied" the milli it cannot use."""
    cpu_ok = cpu_free >= shape.cpu_mhz
    if shape.milli == 0:
        return (_CPU_FITS if cpu_ok else _CPU_SHORT), 0
    need = TAKES_WHOLE if shape.milli >= MILLI_PER_GPU else TAKES_SHARES
    usable = 0
    short = 0
    accessible = False
    for model, kind, free in state:
        serves = bool(kind & need) and (not shape.models or model in shape.models)
        accessible = accessible or serves
        if serves and free >= shape.milli:
            usable += 1
        else:
            short += free
    if not accessible:
        return _NO_ACCESS, 0
    if usable >= shape.gpus:
        return (_SATISFIED if cpu_ok else _LACK_CPU), short
    return (_LACK_GPU if cpu_ok else _LACK_BOTH), 0
