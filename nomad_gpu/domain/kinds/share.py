"""Time-slice shares: `milli` of ONE shared GPU, which other tenants use at the same time.

A shared GPU holds shares counted in milli-GPU. With the device plugin it also has N share
instances (the share contract, docs/node.md): a share of M milli takes ceil(M / (1000 / N)) of them,
pinned in Nomad like any device; without it the share is booked here only (advisory) and names the
GPU itself. A share does not isolate its tenant; among a node's GPUs the tightest that fits is
preferred, so that whole shared GPUs stay free for larger shares.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import MILLI_PER_GPU, InstanceId
from nomad_gpu.domain.kinds.base import GpuKind, IndexKey, Option
from nomad_gpu.domain.placement import AllocPlacement, NoFit, WaitReason
from nomad_gpu.domain.units import share_gpu_equivalents

if TYPE_CHECKING:
    from nomad_gpu.domain.freeindex import NodeFree
    from nomad_gpu.domain.inventory import Node


class ShareKind:
    name = "share"
    unit = "milli-GPU"
    spatial = False
    sized = False

    def free_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        return [("share", m, v) for m, v in nf.share_free().items() if v > 0]

    def static_keys(self, nf: NodeFree) -> Iterable[IndexKey]:
        models = dict.fromkeys(g.model for g in nf.gpus.values() if g.mode.takes_shares)
        return [("share", m, MILLI_PER_GPU) for m in models]

    def shortfall(self, what: str, need: int, total: int, largest: int, limits: str) -> NoFit:
        return NoFit(WaitReason.INSUFFICIENT, f"no shared GPU has {need} milli-GPU free{limits}")

    def claims(self, p: AllocPlacement) -> bool:
        return p.is_share


SHARE = ShareKind()


def share_cost(nf: NodeFree, gid: InstanceId, milli: int) -> int:
    """Free milli a share of `milli` takes from GPU `gid`: whole slots where it has share instances."""
    gpu = nf.gpus[gid]
    if not gpu.share_ids:
        return milli
    return nf.gpu_free[gid] - gpu.milli_of(len(nf.slot_free[gid]) - gpu.instances_for(milli))


@dataclass(frozen=True)
class GpuShare:
    """A time-slice share of ONE shared GPU, in milli-GPU (1..1000)."""

    milli: int
    models: frozenset[str] = frozenset()

    kind: ClassVar[GpuKind] = SHARE

    def __post_init__(self) -> None:
        if not 1 <= self.milli <= MILLI_PER_GPU:
            raise InvalidRequest(f"share.milli must be within 1..{MILLI_PER_GPU}, got {self.milli}")

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def count(self) -> int:
        return 1

    @property
    def gpu_equivalents(self) -> float:
        return share_gpu_equivalents(self.milli)

    def need(self) -> int:
        return self.milli

    def allows_name(self, name: str) -> bool:
        return self.allows(name)

    def options(self, nf: NodeFree) -> Iterator[Option]:
        milli = self.milli
        for gid, gpu in nf.gpus.items():
            if not gpu.mode.takes_shares or not self.allows(gpu.model) or nf.gpu_free[gid] < milli:
                continue
            if gpu.max_tenants is not None and nf.tenants.get(gid, 0) >= gpu.max_tenants:
                continue
            if gpu.share_ids:  # the device plugin's share instances: pin the first free ones
                yield Option(tuple(nf.slot_free[gid][: gpu.instances_for(milli)]), gpu.share_device or gpu.model,
                             milli, gid)
            else:
                yield Option((gid,), gpu.model, milli)

    def left_after(self, nf: NodeFree, opt: Option) -> int:
        gid = opt.shared_gpu
        return nf.gpu_free[gid] - share_cost(nf, gid, self.milli)

    def capacity(self, nf: NodeFree) -> int:
        return MILLI_PER_GPU

    def prefer_tight(self, nf: NodeFree, opt: Option) -> float:
        return -float(nf.gpu_free[opt.shared_gpu])

    def fragment_shape(self) -> tuple[int, int] | None:
        return (1, self.milli)

    def describe(self) -> str:
        return f"a shared GPU with {self.milli}/{MILLI_PER_GPU} free"

    def limits(self) -> list[str]:
        return []

    def room_on(self, node: Node) -> dict[Hashable, int]:
        # every share draws from one bucket: the milli of the node's shared GPUs it may use
        return {("share",): MILLI_PER_GPU * len(self._shared(node))}

    def room_units(self) -> int:
        return self.milli

    def never_on(self, scope: Sequence[Node]) -> str | None:
        if any(self._shared(n) for n in scope):
            return None
        return "a time-slice share needs a shared GPU; none here is shared"

    def _shared(self, node: Node) -> list[str]:
        return [gpu.id for gpu in node.gpus if gpu.mode.takes_shares and self.allows(gpu.model)]
