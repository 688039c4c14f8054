"""Whole GPUs: `count` GPUs of one model, each taken by one job at a time.

Nomad fills one device request from one device group, so an option is `count` free GPUs of one
model. Multi-GPU sets are where a topology term belongs: `WholeKind.sets` is the one place that
turns a model's free GPUs into the candidate sets of an ask (today: the first `count` in device
order), and `WholeKind.set_term` the term a policy may add for a set (0 today).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import MILLI_PER_GPU, InstanceId
from nomad_gpu.domain.inventory import GpuMode
from nomad_gpu.domain.kinds.base import CountedKind, GpuKind, IndexKey, Option
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.topology import LinkClass, Topology

if TYPE_CHECKING:
    from nomad_gpu.domain.freeindex import NodeFree
    from nomad_gpu.domain.inventory import Node

SetsHook = Callable[["NodeFree", str, Sequence[InstanceId], int], Iterator[tuple[InstanceId, ...]]]
"""(node, model, its free GPUs in device order, count) -> candidate sets of `count` GPUs."""
ChooseHook = Callable[["Topology | None", Sequence[InstanceId], int], tuple[InstanceId, ...]]
"""(topology, GPUs in device order, count) -> the set of `count` taken (empty: too few)."""


class WholeKind(CountedKind):
    name = "whole"
    unit = "GPUs"

    def __init__(self) -> None:
        self.sets: SetsHook | None = None
        """Candidate sets of a multi-GPU ask on one model; None: the first `count` free GPUs."""
        self.set_term: Callable[[NodeFree, Option], float] | None = None
        """A policy's term for a set (a topology score); None: every set scores alike."""
        self.choose: ChooseHook | None = None
        """The set of `count` a node's topology gives out of some of its GPUs (`topochoice.choose`); None: the
        first `count`."""

    def free_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        return [("whole", m, len(ids)) for m, ids in nf.whole_free().items()]

    def static_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        counts: dict[str, int] = {}
        for g in nf.gpus.values():
            if g.mode.takes_whole:
                counts[g.model] = counts.get(g.model, 0) + 1
        return [("whole", m, c) for m, c in counts.items()]

    def claims(self, p: AllocPlacement) -> bool:
        return not p.is_share and bool(p.instance_ids) and " MIG " not in (p.device_name or "")


WHOLE = WholeKind()


@dataclass(frozen=True)
class WholeGpus:
    """`count` whole GPUs of one model (Nomad fills one request from one device group)."""

    count: int
    models: frozenset[str] = frozenset()
    """Allowed models; empty = any."""
    min_memory_mib: int = 0
    nvlink: bool = False
    """Only a set whose every GPU has an NVLink peer inside it (`LinkClass.NVLINK`), on a node that publishes
    its topology: such an ask waits for one rather than take PCIe peers."""

    kind: ClassVar[GpuKind] = WHOLE

    def __post_init__(self) -> None:
        if self.count < 1:
            raise InvalidRequest("gpu.count must be >= 1")
        if self.min_memory_mib < 0:
            raise InvalidRequest("gpu.min_memory_mib must be >= 0")
        if self.nvlink and self.count < 2:
            raise InvalidRequest("gpu.nvlink needs gpu.count >= 2 (one GPU has no link)")

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def gpu_equivalents(self) -> float:
        return float(self.count)

    def need(self) -> int:
        return self.count

    def allows_name(self, name: str) -> bool:
        return self.allows(name)

    def options(self, nf: NodeFree) -> Iterator[Option]:
        count, memory, sets = self.count, self.min_memory_mib, WHOLE.sets
        for model, ids in sorted(nf.whole_free().items()):
            if not self.allows(model) or len(ids) < count:
                continue
            if memory and nf.gpus[ids[0]].memory_mib < memory:
                continue
            if sets is None:
                candidates: Iterable[tuple[InstanceId, ...]] = (tuple(ids[:count]),)
            else:
                candidates = sets(nf, model, ids, count)
            for chosen in candidates:
                if not self.nvlink or _nvlinked(nf.node.topology, chosen):
                    yield Option(chosen, model)

    def left_after(self, nf: NodeFree, opt: Option) -> int:
        return len(nf.whole_free().get(opt.device_name or "", ())) - self.count

    def capacity(self, nf: NodeFree) -> int:
        return sum(1 for gpu in nf.gpus.values() if gpu.mode.takes_whole)

    def prefer_tight(self, nf: NodeFree, opt: Option) -> float:
        return 0.0

    def fragment_shape(self) -> tuple[int, int] | None:
        return (self.count, MILLI_PER_GPU)

    def describe(self) -> str:
        models = "/".join(sorted(self.models)) if self.models else "GPU"
        return f"{self.count} x {models}" + (" on NVLink" if self.nvlink else "")

    def limits(self) -> list[str]:
        out = [f"it needs {self.min_memory_mib} MiB per GPU"] if self.min_memory_mib else []
        return out + (["it needs the GPUs joined by NVLink and waits for such a set rather than take PCIe peers"]
                      if self.nvlink else [])

    def room_on(self, node: Node) -> dict[Hashable, int]:
        if self.nvlink and not self._linked_on(node):
            return {}  # no NVLink set of this size here, however empty
        return {("whole", model): n for model, n in self._by_model(node).items()}

    def room_units(self) -> int:
        return self.count

    def never_on(self, scope: Sequence[Node]) -> str | None:
        models = sorted({gpu.model for n in scope for gpu in n.gpus if gpu.mode is not GpuMode.SHARED})
        if not models:
            return "whole GPUs asked for; no node here has a GPU that is not shared"
        if self.models and not any(self.allows(m) for m in models):
            return f"no GPU of model {', '.join(sorted(self.models))}; models here: {', '.join(models)}"
        if self.min_memory_mib:
            largest = max((gpu.memory_mib for n in scope for gpu in n.gpus if self.allows(gpu.model)), default=0)
            if largest < self.min_memory_mib:
                return f"GPUs of {self.min_memory_mib} MiB asked for; at most {largest} MiB per GPU here"
        most = max((max(self._by_model(n).values(), default=0) for n in scope), default=0)
        if most < self.count:
            return f"{self.count} GPUs of one model on one node asked for; at most {most} on one node here"
        if self.nvlink:
            return self._never_linked(scope)
        return None

    def _never_linked(self, scope: Sequence[Node]) -> str | None:
        what = f"{self.count} NVLink-connected GPUs of one model on one node asked for"
        published = [n for n in scope if n.topology is not None]
        if not published:
            return (f"{what}; no node here publishes its topology (the stock NVIDIA plugin does not; the "
                    "nomad-gpu device plugin does: docs/topology.md)")
        if any(self._linked_on(n) for n in published):
            return None
        return f"{what}; no node here has an NVLink set of {self.count} free of other jobs, even empty"

    def _linked_on(self, node: Node) -> bool:
        """Whether an empty ``node`` offers an NVLink set of ``count`` GPUs of one allowed model."""
        choose = WHOLE.choose or (lambda topology, ids, count: tuple(ids[:count]))
        by_model: dict[str, list[InstanceId]] = {}
        for gpu in node.gpus:
            if gpu.mode is not GpuMode.SHARED and self.allows(gpu.model) and gpu.memory_mib >= self.min_memory_mib:
                by_model.setdefault(gpu.model, []).append(gpu.id)
        return any(_nvlinked(node.topology, choose(node.topology, ids, self.count)) for ids in by_model.values())

    def _by_model(self, node: Node) -> dict[str, int]:
        """GPUs per model an empty ``node`` at full size offers the ask (any mode but shared)."""
        counts: dict[str, int] = {}
        for gpu in node.gpus:
            if gpu.mode is not GpuMode.SHARED and self.allows(gpu.model) and gpu.memory_mib >= self.min_memory_mib:
                counts[gpu.model] = counts.get(gpu.model, 0) + 1
        return counts


def _nvlinked(topology: Topology | None, gpus: Sequence[InstanceId]) -> bool:
    """Whether the set is NVLink-connected on a node that publishes its topology (unknown is not NVLink)."""
    return topology is not None and len(gpus) > 1 and topology.link_class(gpus) is LinkClass.NVLINK
