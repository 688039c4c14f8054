"""The kind protocol: what the core asks of one kind of GPU capacity, and of an ask for it.

A kind (whole GPUs, MIG instances, time-slice shares, ...) is two things, each a protocol here:

- `GpuKind`, the kind itself, one object per kind: what a node offers of it (the free-capacity
  index's keys), its unit, whether it isolates its tenant, how a shortage of it reads;
- `GpuAsk`, a request for it (a frozen dataclass in the kind's module): the options it finds on a
  node's free state, its best-fit terms, the shape it counts as in the fragmentation measure, how
  it is described to a user.

The fitter, the policies and the fragmentation measure reach a kind only through these methods, so
a new kind is a module that implements both and registers its `GpuKind` (`kinds.registry`); no
`isinstance` over kinds is needed anywhere else. The NodeFree type is imported for annotations
only: the free-capacity index imports the registry, and a kind reads a node's free state but never
builds one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.placement import AllocPlacement, NoFit, WaitReason

if TYPE_CHECKING:
    from nomad_gpu.domain.freeindex import NodeFree
    from nomad_gpu.domain.inventory import Node

IndexKey = tuple[str, str, int]
"""(kind name, device group or model, value): one bucket of the free-capacity index."""


@dataclass(frozen=True)
class Option:
    """One way to host an ask on a node: the instances and the device group they come from."""

    instance_ids: tuple[InstanceId, ...] = ()
    device_name: str | None = None
    share_milli: int = 0
    share_gpu: InstanceId | None = None
    """For a share pinned to share instances (`instance_ids`), their GPU."""
    plan: Hashable | None = None
    """What must change on the node before this option exists (a MIG re-layout that creates the
    instances); None: the instances exist now. Built-in kinds offer no planned options yet."""

    @property
    def shared_gpu(self) -> InstanceId:
        """The GPU a share option runs on, either way it is pinned."""
        return self.share_gpu or self.instance_ids[0]


class GpuKind(Protocol):
    """One kind of GPU capacity, as the index, the fitter's verdicts and the renderers see it."""

    @property
    def name(self) -> str:
        """The kind's key: in the free-capacity index, in `AllocPlacement.kind`, in the adapters'
        registries of `render/` and `nomad/`."""
        ...

    @property
    def spatial(self) -> bool:
        """True: a tenant has its devices to itself (whole GPUs, MIG); False: it shares a GPU's
        time with others (shares)."""
        ...

    @property
    def sized(self) -> bool:
        """True: an index value is an amount (GPUs, instances) that totals add up; False: it is the
        largest free size on one device, and totals count devices instead (shares)."""
        ...

    def free_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        """What the node offers of this kind now (the node is known to be schedulable)."""
        ...

    def static_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        """What the node would offer of this kind when empty (for "no node offers this shape")."""
        ...

    def shortfall(self, what: str, need: int, total: int, largest: int, limits: str) -> NoFit:
        """The verdict once no candidate fits and neither CPU, memory nor holds explain it: `total`
        and `largest` are the index's figures over the names the ask allows, `limits` the job's
        own limits already worded (empty or ` (...)`)."""
        ...

    def claims(self, p: AllocPlacement) -> bool:
        """Whether a placement without `kind` set (one read back from storage) is of this kind."""
        ...


class GpuAsk(Protocol):
    """A request for one kind of capacity, as part of one allocation ask (`AllocAsk.gpu`)."""

    kind: ClassVar[GpuKind]

    @property
    def models(self) -> frozenset[str]:
        """Allowed GPU models; empty = any."""
        ...

    @property
    def count(self) -> int:
        """Devices asked for (GPUs, instances; 1 for a share of one GPU)."""
        ...

    @property
    def gpu_equivalents(self) -> float:
        """What the ask counts for in quotas and fair share (DESIGN 3.3)."""
        ...

    def allows(self, model: str) -> bool: ...

    def need(self) -> int:
        """The index value a node needs under one of the ask's names (`allows_name`)."""
        ...

    def allows_name(self, name: str) -> bool:
        """Whether an index name of this kind (a model or a device group) can serve the ask."""
        ...

    def options(self, nf: NodeFree) -> Iterator[Option]:
        """Every GPU-feasible way to host the ask on `nf`, in device order (CPU and memory are
        checked elsewhere). Nodes with equal `NodeFree.signature()` list them alike."""
        ...

    def left_after(self, nf: NodeFree, opt: Option) -> int:
        """Free capacity of this kind left on the node once `opt` is taken (best fit's numerator)."""
        ...

    def capacity(self, nf: NodeFree) -> int:
        """The node's capacity of this kind (best fit's denominator)."""
        ...

    def prefer_tight(self, nf: NodeFree, opt: Option) -> float:
        """Among a node's equally scored options, higher is tighter (0 when they are alike)."""
        ...

    def fragment_shape(self) -> tuple[int, int] | None:
        """(GPUs, milli-GPU per GPU) as the fragmentation measure counts the ask; None when it does
        not take GPU milli (MIG instances are whole devices of their own)."""
        ...

    def describe(self) -> str:
        """What the ask wants, for a wait reason ("2 x GPU", "1 x MIG 3g.40gb")."""
        ...

    def limits(self) -> list[str]:
        """The ask's own limits that may keep free capacity out of its reach, worded."""
        ...

    def room_on(self, node: Node) -> dict[Hashable, int]:
        """What ``node``, empty and at full size, could ever offer the ask ("could this job ever
        run?", `domain/feasible.py`): bucket -> amount in `room_units`. Asks of a job that draw from
        the same bucket add up (a bucket key names its kind); empty: the node never holds the ask."""
        ...

    def room_units(self) -> int:
        """What the ask takes from the bucket of `room_on` it lands in."""
        ...

    def never_on(self, scope: Sequence[Node]) -> str | None:
        """Why no node of ``scope`` (at full size) could ever hold the ask alone, with the nearest
        thing they offer; None when one could."""
        ...


class CountedKind:
    """Shared wording for kinds whose index values are device counts (whole GPUs, MIG instances)."""

    unit = "devices"
    spatial = True
    sized = True

    def shortfall(self, what: str, need: int, total: int, largest: int, limits: str) -> NoFit:
        unit = self.unit
        if largest >= need:
            # one node has the shape free, yet no candidate took it: the job's own limits rule it out
            return NoFit(WaitReason.INSUFFICIENT,
                         f"{largest} {unit} free on one node, but none this job can use{limits}")
        if total >= need:
            return NoFit(WaitReason.FRAGMENTED,
                         f"{total} {unit} free in total, at most {largest} on one node; {need} needed")
        return NoFit(WaitReason.INSUFFICIENT, f"{total} of {need} {unit} free")
