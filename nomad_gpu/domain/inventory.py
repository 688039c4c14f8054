"""What the cluster has: nodes, their CPU and memory, and GPU capacity of three kinds (DESIGN 3.4).

- whole GPUs (`GPU-<uuid>`), taken by one job at a time;
- MIG instances (`MIG-<uuid>`, device name `<model> MIG <profile>`), each taken whole;
- shared GPUs, GPUs an operator marked for time-slicing, holding shares counted in milli-GPU. With the
  project's device plugin a shared GPU of N slots also has N share instances (`<GPU-uuid>-share-<k>`):
  a slot is 1000/N milli-GPU, and a share of M milli takes ceil(M / slot) of them, pinned in Nomad like
  any device; without the plugin (the `sharing:` setting) shares are booked here only, advisory.

A GPU in FLEX mode takes both whole and share requests; the service never uses it (Nomad cannot
pin a GPU both ways at once) but the trace simulator does, as the FGD paper's cluster does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from nomad_gpu import sharecontract
from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.topology import Topology
from nomad_gpu.domain.units import MigProfile


class NodeStatus(enum.Enum):
    INITIALIZING = "initializing"
    READY = "ready"
    DOWN = "down"
    DISCONNECTED = "disconnected"


class GpuMode(enum.Enum):
    WHOLE = "whole"
    SHARED = "shared"
    FLEX = "flex"

    @property
    def takes_whole(self) -> bool:
        return self is not GpuMode.SHARED

    @property
    def takes_shares(self) -> bool:
        return self is not GpuMode.WHOLE


@dataclass(frozen=True)
class Gpu:
    """A physical GPU offered whole or as time-slice shares."""

    id: InstanceId
    model: str
    memory_mib: int = 0
    healthy: bool = True
    mode: GpuMode = GpuMode.WHOLE
    max_tenants: int | None = None
    """For a shared GPU, the operator's cap on co-tenants (N equal slots); None = only the milli sum."""
    share_ids: tuple[InstanceId, ...] = ()
    """The device plugin's share instances of this GPU, one per slot; empty: no Nomad device stands for
    a share (advisory sharing), and a share's placement names the GPU itself."""
    share_device: str | None = None
    """The Nomad device group (name) of `share_ids`: `<model>`, or `<model> (<N> slots)`."""
    vendor: str = "nvidia"
    """The fingerprint's device vendor: the job's device block is `<vendor>/gpu/<model>`."""
    pci_bus_id: str | None = None
    """Where the GPU sits (its fingerprint's `Locality.PciBusID`); None when not reported."""
    health: str = ""
    """Why the device plugin reports it unhealthy (`HealthDescription`); "" when healthy or unsaid."""

    def instances_for(self, milli: int) -> int:
        """Share instances a share of `milli` takes: ceil(milli / (1000 / N)), exactly in integers."""
        return sharecontract.instances_for(milli, len(self.share_ids))

    def milli_of(self, instances: int) -> int:
        """Milli-GPU that `instances` share instances stand for (the largest share they can hold)."""
        return sharecontract.milli_of(instances, len(self.share_ids))


@dataclass(frozen=True)
class MigPlacementOf:
    """Where a MIG instance sits: its parent GPU's UUID and its memory slices `start`..`start+size-1` of 8."""

    gpu: str
    start: int
    size: int


@dataclass(frozen=True)
class MigSlice:
    """A MIG instance, reported by the stock plugin as its own device."""

    id: InstanceId
    model: str
    profile: MigProfile
    memory_mib: int = 0
    healthy: bool = True
    vendor: str = "nvidia"
    pci_bus_id: str | None = None
    """The parent GPU's PCI bus ID (MIG instances share it): which instances are slices of one GPU. None
    when not reported."""
    placement: MigPlacementOf | None = None
    """Its parent GPU and memory slices, where the node's device plugin publishes them (ours does; the stock
    plugin does not: None)."""
    health: str = ""
    """Why the device plugin reports it unhealthy (`HealthDescription`); "" when healthy or unsaid."""

    @property
    def device_name(self) -> str:
        return f"{self.model} MIG {self.profile.name}"


@dataclass(frozen=True)
class Node:
    """One Nomad client node as the core sees it; raw Nomad JSON never gets past the decoder."""

    id: NodeId
    name: str = ""
    datacenter: str = "dc1"
    node_pool: str = "default"
    node_class: str = ""
    status: NodeStatus = NodeStatus.READY
    eligible: bool = True
    draining: bool = False
    drivers: frozenset[str] | None = None
    """Task drivers Nomad reports detected and healthy here; None when the node JSON did not say."""
    cpu_mhz: int = 0
    memory_mb: int = 0
    gpus: tuple[Gpu, ...] = ()
    migs: tuple[MigSlice, ...] = ()
    topology: Topology | None = None
    """How its whole GPUs reach each other, as the project's device plugin publishes it; None where no
    plugin says (the stock plugin): the GPUs are then PCIe peers of unknown distance."""

    @property
    def schedulable(self) -> bool:
        """Down, ineligible and draining nodes offer nothing new."""
        return self.status is NodeStatus.READY and self.eligible and not self.draining

    def vendor_of(self, instance: InstanceId) -> str | None:
        """The fingerprint vendor of a whole GPU or MIG instance of this node; None if it has no such one."""
        for gpu in self.gpus:
            if gpu.id == instance:
                return gpu.vendor
        for mig in self.migs:
            if mig.id == instance:
                return mig.vendor
        return None

    def instance_ids(self) -> Iterator[InstanceId]:
        for g in self.gpus:
            yield g.id
            yield from g.share_ids
        for m in self.migs:
            yield m.id

    def gpu_models(self) -> frozenset[str]:
        return frozenset(g.model for g in self.gpus)


@dataclass(frozen=True)
class Inventory:
    """All nodes, keyed by id; iteration order is the node-id order, so decisions are deterministic."""

    nodes: Mapping[NodeId, Node] = field(default_factory=dict)

    @staticmethod
    def of(nodes: Iterable[Node]) -> Inventory:
        return Inventory({n.id: n for n in sorted(nodes, key=lambda n: n.id)})

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)
