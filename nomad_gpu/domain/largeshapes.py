"""Large shapes: the asks whose homes are few (every multi-GPU shape, every typical shape bound to named
GPU models), a node's room for copies of them, and the cluster's room for them kept placement by
placement.

It exists apart from `fragmentation.py` because this is the companion measure `Demand.large` weighs,
not F itself: F's expectation hides a shape that fails whole when no node has that many GPUs of its
models free and the CPU beside them, so this module counts that room directly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.gpustate import TAKES_WHOLE, GpuState
from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.requests import GpuAsk

if TYPE_CHECKING:  # annotations only: `Demand` is built from these functions
    from nomad_gpu.domain.fragmentation import Demand, Shape


def room_levels(room: Iterable[int]) -> tuple[int, ...]:
    """Each shape's room as a power-of-two level (0: none left); the weights depend on nothing else."""
    return tuple(max(0, n).bit_length() for n in room)


def large_shapes(ordered: list[tuple[Shape, int]], typical: int) -> tuple[tuple[Shape, float], ...]:
    """The shapes whose homes are few for a reason F's typical set may hide, each with its frequency:
    every multi-GPU shape, typical or not (whether one ranks among the typical ones is an accident
    of the mix, and the big nodes it needs are where CPU-heavy work goes), and every typical shape
    bound to named GPU models (the nodes of a scarce model are where light work goes to use GPUs
    that CPU-heavy tasks would strand). `ordered[:typical]` are the typical shapes; frequencies are
    among the shapes returned."""
    large = [(s, n) for k, (s, n) in enumerate(ordered)
             if s.milli > 0 and (s.gpus > 1 or (k < typical and s.models))]
    count = float(sum(n for _, n in large))
    return tuple((s, n / count) for s, n in large) if count else ()


def whole_by_model(state: GpuState) -> tuple[Counter[str], int]:
    """A node's whole free GPUs by model, and in all."""
    by_model: Counter[str] = Counter(model for model, kind, free in state
                                     if kind & TAKES_WHOLE and free >= MILLI_PER_GPU)
    return by_model, sum(by_model.values())


def may_be_large(gpu: GpuAsk | None, smallest: int, bound: bool) -> bool:
    """A cheap test before `Shape.of`: most asks are one GPU or a share, with no model named. Only a
    filter: `Shape.of` and membership decide."""
    if gpu is None:
        return False
    dims = gpu.fragment_shape()
    if dims is None:
        return False
    return (dims[1] >= MILLI_PER_GPU and dims[0] >= smallest) or (bound and bool(gpu.models))


def copies(shape: Shape, whole: tuple[Counter[str], int], cpu_free: int) -> int:
    """Copies of `shape` that fit on a node by its whole free GPUs of an allowed model (`whole`, from
    `_whole_by_model`) and by its free CPU."""
    by_model, every = whole
    fits = (sum(by_model[m] for m in shape.models) if shape.models else every) // max(1, shape.gpus)
    if shape.cpu_mhz > 0:
        fits = min(fits, max(0, cpu_free) // shape.cpu_mhz)
    return fits


class RoomLeft:
    """The room a cluster has left for a demand's large shapes, kept placement by placement, and the
    demand re-weighed by it whenever a shape's room crosses a power of two (`Demand.weighed`): what
    `Demand.scarce_on` over the nodes as they stand gives, without a pass over every node each time
    (the packing experiment places tens of thousands of tasks one by one)."""

    def __init__(self, demand: Demand, index: FreeIndex) -> None:
        self.demand, self.index = demand, index
        self.room = [0] * len(demand.frequencies)
        for nf in index.nodes():
            self._add(nf, 1)
        self.levels = room_levels(self.room)

    def _add(self, nf: NodeFree | None, sign: int) -> None:
        if nf is not None and nf.offered:
            for i, copies in enumerate(self.demand.room_of(nf)):
                self.room[i] += sign * copies

    def moved(self, before: Iterable[NodeFree | None]) -> Demand | None:
        """After a change to the nodes that stood as `before` (now as `index` has them): the demand
        re-weighed, or None when no weight moved. A node listed twice counts once."""
        for nf in {nf.id: nf for nf in before if nf is not None}.values():
            self._add(nf, -1)
            self._add(self.index.get(nf.id), 1)
        levels = room_levels(self.room)
        if levels == self.levels:
            return None
        self.levels = levels
        return self.demand.weighed(self.room)
