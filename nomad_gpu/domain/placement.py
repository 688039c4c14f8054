"""Placements and verdicts: the answer to "where does this go?", or exactly why it goes nowhere."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.topology import LinkClass


@dataclass(frozen=True)
class AllocPlacement:
    """One allocation pinned to a node and the exact instances it will use."""

    group: str
    index: int
    node: NodeId
    cpu_mhz: int
    memory_mb: int
    instance_ids: tuple[InstanceId, ...] = ()
    device_name: str | None = None
    """Nomad device group name of whole GPUs or MIG slices (`<model>` or `<model> MIG <profile>`)."""
    share_milli: int = 0
    """Milli-GPU of a time-slice share. Its instance_ids are the share instances it pins (`share_gpu`
    set, `device_name` their device group), or exactly the one shared GPU (advisory sharing)."""
    gpu_equivalents: float = 0.0
    share_gpu: InstanceId | None = None
    """The GPU whose share instances a share pins; None when instance_ids is the GPU itself."""
    kind: str = field(default="", compare=False)
    """The GPU kind placed (`domain.kinds`); empty for CPU-only work and for placements read back from
    storage, whose kind follows from the fields above (`kinds.kind_of`). Not compared: the same
    instances are the same placement whichever way it was learnt."""
    tier: int = field(default=0, compare=False)
    """Which tier of an ask with alternatives won (1 = the first); 0 for an ask with one option."""
    note: str = field(default="", compare=False)
    """Why this option: the chosen alternative and what the tiers before it lacked (empty for an
    ask with one option)."""
    link: LinkClass | None = field(default=None, compare=False)
    """How the GPUs of a set of two or more of the node's GPUs reach each other (`topochoice.gpu_set_link`:
    `PCIE` where the node publishes no topology); None for anything else."""

    @property
    def is_share(self) -> bool:
        return self.share_milli > 0

    @property
    def shared_gpu(self) -> InstanceId | None:
        """The one GPU a share runs on, either way it is pinned; None for anything else."""
        if not self.is_share:
            return None
        return self.share_gpu or (self.instance_ids[0] if self.instance_ids else None)


class WaitReason(enum.Enum):
    """Why a job is not admitted, most specific first. The value is what users read."""

    NO_SUCH_SHAPE = "no node offers this shape of GPU"
    FRAGMENTED = "enough capacity free in total, but not on any one node"
    INSUFFICIENT = "not enough free capacity of this shape"
    CPU_MEMORY = "GPUs free, but not with enough CPU or memory beside them"
    QUOTA = "team quota reached"
    RESERVED = "capacity reserved for an older job at the head of the queue"
    GANG = "not every task group of the job fits at once"
    HELD = "held: waiting for capacity reserved for it to drain"


@dataclass(frozen=True)
class NoFit:
    """A ranked verdict for an ask that fits nowhere now, with a human-readable detail."""

    reason: WaitReason
    detail: str

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.detail}" if self.detail else self.reason.value
