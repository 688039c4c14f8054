"""Nomad JSON -> core values. The only module where Nomad's node and allocation field names appear.

Shapes follow reference/nomad-api.md sections 3-5: nodes from `GET /v1/node/:id` or
`GET /v1/nodes?resources=true`, devices grouped by name (`<model>` for whole GPUs,
`<model> MIG <profile>` for MIG instances), device attributes with or without null value keys.
Shared GPUs come either from the project's own device plugin (vendor `nomad-gpu`, type
`shared-gpu`: N share instances `<GPU uuid>-share-<k>` per GPU, which become one `Gpu` holding them
as `share_ids`) or from stock-plugin GPUs that the operator marks shared in `SharingConfig`
(advisory: no Nomad device stands for a share, so nothing but the queue keeps tenants apart).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nomad_gpu.domain import topowire
from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, MigSlice, Node, NodeStatus
from nomad_gpu.domain.topology import GpuPlace, Topology
from nomad_gpu.nomad.devicegroups import Decoded, DeviceGroup, group_decoder_for
from nomad_gpu.nomad.devicegroups import pci_bus_id as _pci_bus_id
from nomad_gpu.nomad.taskevents import exited_zero, killed

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class ShareRule:
    """Marks stock-plugin GPUs as time-slice shared. Empty fields match anything."""

    node: str = ""
    """A node ID or name."""
    model: str = ""
    gpu_id: str = ""
    slots: int | None = None
    """N equal slots: at most N co-tenants on one GPU."""

    def matches(self, node: Node, gpu_id: str, model: str) -> bool:
        return ((not self.node or self.node in (node.id, node.name)) and (not self.model or self.model == model)
                and (not self.gpu_id or self.gpu_id == gpu_id))


@dataclass(frozen=True)
class SharingConfig:
    rules: tuple[ShareRule, ...] = field(default_factory=tuple)

    def rule_for(self, node: Node, gpu_id: str, model: str) -> ShareRule | None:
        return next((r for r in self.rules if r.matches(node, gpu_id, model)), None)


NO_SHARING = SharingConfig()


class AllocStatus(enum.Enum):
    """Nomad's ClientStatus. `complete`, `failed` and `lost` are terminal (reference section 3)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    LOST = "lost"
    UNKNOWN = "unknown"

    def is_terminal(self) -> bool:
        return self in (AllocStatus.COMPLETE, AllocStatus.FAILED, AllocStatus.LOST)


MAX_RUN_EXCEEDED = "allocation exceeded max_run_duration"  # nomad/structs/alloc.go v2.0.3
ALLOC_LOST = "alloc is lost since its node is down"
"""The servers' `DesiredDescription` for a lost allocation (`StatusAllocLost`, scheduler/structs/const.go
v2.0.5; `allocLost`, scheduler/generic_sched.go v1.10.5)."""


@dataclass(frozen=True)
class PortMapping:
    """One host port Nomad assigned to an allocation's group network (`AllocatedPortMapping`)."""

    label: str
    host_ip: str
    value: int

    @property
    def address(self) -> str:
        """`host:port`, as Nomad's service registration publishes it (`[v6]:port` for IPv6)."""
        return f"[{self.host_ip}]:{self.value}" if ":" in self.host_ip else f"{self.host_ip}:{self.value}"


@dataclass(frozen=True)
class AllocInfo:
    """What the service needs from an allocation: whose it is, where, on what, and how it ends."""

    id: str
    job_id: str
    task_group: str
    node_id: NodeId
    client_status: AllocStatus
    desired_status: str
    device_ids: tuple[InstanceId, ...] = ()
    device_name: str | None = None
    cpu_mhz: int = 0
    memory_mb: int = 0
    modify_index: int = 0
    create_time_ns: int = 0
    modify_time_ns: int = 0
    namespace: str = "default"
    next_allocation: str = ""
    """Set when Nomad placed a replacement (a migration, `alloc stop`, a reschedule)."""
    migrate: bool = False
    """`DesiredTransition.Migrate`: a drain asked for this allocation to move."""
    job_version: int = 0
    resources_known: bool = False
    """The JSON carried `AllocatedResources`, so `device_ids` are what Nomad granted (service/life/pins.py)."""
    exited_zero: bool = False
    """Every task's last run ended by itself with exit code 0 (`Terminated`, then nothing but `Not
    Restarting`), read from `TaskStates`."""
    stopped_zero: bool = False
    """Every task's last `Terminated` has exit code 0, a kill after it allowed: it saved its state and exited
    on the stop's signal within its kill_timeout."""
    ports: tuple[PortMapping, ...] = ()
    """The host ports of its group network, from `AllocatedResources.Shared.Ports` (when `resources_known`)."""
    max_run_exceeded: bool = False
    """Nomad's client ended it at the group's `max_run_duration` (2.0.3+): `complete`, with the
    description `AllocTimeoutReasonMaxRunDuration` (`EnforceMaxRunDurationTimeout`,
    client/allocrunner/alloc_runner.go v2.0.3). A time-out, never a success."""
    preempted_by: str = ""
    """`PreemptedByAllocation`: the allocation Nomad evicted this one for (`Plan.AppendPreemptedAlloc`,
    nomad/structs/structs.go v2.0.5; `DesiredStatus: evict`)."""
    killed: bool = False
    """A task's last event is a kill (`Killing`, `Killed`): stopped, not ended by itself. With desired `run`,
    its own client stopped it cut off from the servers (`stop_on_client_after`, client/heartbeatstop.go)."""
    desired_description: str = ""
    """`DesiredDescription`: why the servers want it stopped (in the list stubs too); ALLOC_LOST when they
    called it lost, kept after its client reports the end (`nestedUpdateAllocFromClient` leaves it)."""

    @property
    def cut_off(self) -> bool:
        """`lost` or `unknown`: Nomad's servers cannot hear its node, and its task may still run there until
        the client stops it itself or reconnects (client/heartbeatstop.go, v2.0.5; docs/partitions.md)."""
        return self.client_status in (AllocStatus.LOST, AllocStatus.UNKNOWN)

    @property
    def ended_cut_off(self) -> bool:
        """Ended (its client reported it) because its node was cut off from the servers, told from what a
        restarted service reads again: the servers' lost verdict in `DesiredDescription`, or a kill with
        desired `run`, which only its own client gives, past `stop_on_client_after` (`heartbeatStop.stopAlloc`
        -> `allocRunner.Destroy` -> `killTasks`, client/heartbeatstop.go and client/allocrunner/alloc_runner.go,
        v2.0.5 and v1.10.5). Not `lost` or `unknown` themselves: those are `cut_off`, the task maybe running."""
        if self.client_status not in (AllocStatus.COMPLETE, AllocStatus.FAILED):
            return False
        if self.desired_description == ALLOC_LOST:
            return True
        # a killed task does not fail its allocation: `failed` with a kill is a sibling's failure instead
        return (self.client_status is AllocStatus.COMPLETE and self.killed and self.desired_status == "run"
                and not self.next_allocation and not self.migrate and not self.max_run_exceeded
                and not self.preempted_by)

    @property
    def is_terminal(self) -> bool:
        return self.client_status.is_terminal()

    @property
    def succeeded(self) -> bool:
        """Ended by itself, successfully. A task Nomad kills also ends `complete` (client/allocrunner,
        v2.0.5), so success also needs desired `run`, no migration and no replacement.

        A service job's task that exits 0 ends `failed` when its restart policy allows no restarts:
        only batch jobs treat exit 0 as done (`NewRestartTracker` and `GetState`,
        client/allocrunner/taskrunner/restarts/restarts.go, v2.0.5 and v1.10.5). So a `failed`
        allocation whose every task exited 0 by itself succeeded too; a batch job never gets there."""
        if self.desired_status != "run" or self.migrate or self.next_allocation or self.max_run_exceeded \
                or self.killed:
            return False
        return self.client_status is AllocStatus.COMPLETE or (self.client_status is AllocStatus.FAILED
                                                              and self.exited_zero)

    def outcome(self) -> str:
        """A short word for why it ended, for an entry's reason."""
        if self.succeeded:
            return "complete"
        if self.max_run_exceeded:
            return "timed out (max_run_duration)"
        if self.preempted_by:
            return f"preempted by allocation {self.preempted_by}"
        if self.client_status is AllocStatus.COMPLETE:
            if self.migrate:
                return "migrated"
            if self.killed and self.desired_status == "run" and not self.next_allocation:
                return "killed on its node (desired run)"
            return "replaced" if self.next_allocation else f"killed (desired {self.desired_status})"
        return str(self.client_status.value)


def _number(value: Any, what: str) -> int:
    if value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidInventory(f"{what} is not a number: {value!r}") from None


def _attr_int(attrs: Mapping[str, Any] | None, name: str) -> int:
    """Device attributes are `{Int, Float, String, Bool, Unit}` with unset keys null or absent."""
    a = (attrs or {}).get(name) or {}
    for key in ("Int", "Float"):
        v = a.get(key)
        if v is not None:
            return _number(v, f"device attribute {name}.{key}")
    return 0


def decode_node(raw: Mapping[str, Any], sharing: SharingConfig = NO_SHARING) -> Node:
    """A full node or a `?resources=true` stub. Raises InvalidInventory, naming the node and the
    field, on data we cannot read; a partly read node is never returned."""
    if not isinstance(raw, Mapping):
        raise InvalidInventory(f"node JSON must be an object, got {type(raw).__name__}")
    try:
        node_id = NodeId(str(raw["ID"]))
    except KeyError:
        raise InvalidInventory("node JSON without ID") from None
    try:
        return _decode_node(node_id, raw, sharing)
    except InvalidInventory as exc:
        raise InvalidInventory(f"node {node_id}: {exc}") from exc
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        # a field of an unexpected JSON type somewhere inside: say which node, keep the cause
        raise InvalidInventory(f"node {node_id}: unreadable node JSON ({type(exc).__name__}: {exc})") from exc


def _decode_node(node_id: NodeId, raw: Mapping[str, Any], sharing: SharingConfig) -> Node:
    try:
        status = NodeStatus(raw.get("Status") or "initializing")
    except ValueError:
        status = NodeStatus.DOWN
    res = raw.get("NodeResources") or {}
    reserved = raw.get("ReservedResources") or {}
    cpu = _number((res.get("Cpu") or {}).get("CpuShares"), "NodeResources.Cpu.CpuShares")
    cpu -= _number((reserved.get("Cpu") or {}).get("CpuShares"), "ReservedResources.Cpu.CpuShares")
    mem = _number((res.get("Memory") or {}).get("MemoryMB"), "NodeResources.Memory.MemoryMB")
    mem -= _number((reserved.get("Memory") or {}).get("MemoryMB"), "ReservedResources.Memory.MemoryMB")
    base = Node(
        id=node_id,
        name=str(raw.get("Name") or ""),
        datacenter=str(raw.get("Datacenter") or "dc1"),
        node_pool=str(raw.get("NodePool") or "default"),
        node_class=str(raw.get("NodeClass") or ""),
        status=status,
        eligible=(raw.get("SchedulingEligibility") or "eligible") == "eligible",
        draining=bool(raw.get("Drain")) or raw.get("DrainStrategy") is not None,
        drivers=_healthy_drivers(raw.get("Drivers")),
        cpu_mhz=max(cpu, 0),
        memory_mb=max(mem, 0),
    )
    devices = res.get("Devices") or []
    if not isinstance(devices, list):
        raise InvalidInventory(f"NodeResources.Devices must be a list, got {type(devices).__name__}")
    gpus, migs = _decode_devices(base, devices, sharing)
    return replace(base, gpus=tuple(gpus), migs=tuple(migs), topology=decode_topology(node_id, devices))


def _healthy_drivers(raw: Any) -> frozenset[str] | None:
    """`Drivers: {name: {Detected, Healthy, ...}}` (full nodes and list stubs alike, `api/nodes.go` v2.0.5);
    None when absent, so an old or partial payload never hides a node."""
    if not isinstance(raw, Mapping):
        return None
    return frozenset(str(name) for name, info in raw.items()
                     if isinstance(info, Mapping) and info.get("Detected") and info.get("Healthy"))


def _decode_devices(node: Node, devices: Sequence[Mapping[str, Any]], sharing: SharingConfig
                    ) -> tuple[list[Gpu], list[MigSlice]]:
    gpus: list[Gpu] = []
    shared: list[Gpu] = []
    migs: list[MigSlice] = []
    for group in devices:
        try:
            _decode_group(node, group, sharing, gpus, shared, migs)
        except InvalidInventory as exc:  # one unreadable group must not hide the node's other devices
            _skipped(f"node {node.id}: device group skipped: {exc}")
    # A GPU advertised both whole (a stock plugin not told to ignore it) and as share instances is a
    # shared GPU: the core then never offers it whole, and what Nomad places on it whole is booked.
    share_of = {g.id for g in shared}
    return [g for g in gpus if g.id not in share_of] + shared, migs


_SKIPPED: set[str] = set()


def _skipped(what: str) -> None:
    """Log each distinct skipped group once (a resync decodes every node again), bounded."""
    if what not in _SKIPPED:
        if len(_SKIPPED) < 1000:
            _SKIPPED.add(what)
        logger.warning("%s", what)


def _decode_group(node: Node, group: Mapping[str, Any], sharing: SharingConfig, gpus: list[Gpu],
                  shared: list[Gpu], migs: list[MigSlice]) -> None:
    """One device group into the lists, all of it or nothing, by the decoder of the kind that claims it
    (`devicegroups`)."""
    if not isinstance(group, Mapping):
        raise InvalidInventory(f"a device group must be an object, got {type(group).__name__}")
    view = DeviceGroup(group.get("Vendor") or "", group.get("Type") or "", group.get("Name") or "",
                       _attr_int(group.get("Attributes"), "memory"), group.get("Instances") or [],
                       attrs if isinstance(attrs := group.get("Attributes"), Mapping) else {})
    decoder = group_decoder_for(view)
    if decoder is None:
        return
    found = Decoded()
    decoder.decode(node, view, sharing, found)
    gpus.extend(found.gpus)
    shared.extend(found.shared)
    migs.extend(found.migs)


def decode_topology(node_id: NodeId, devices: Sequence[Any]) -> Topology | None:
    """The project plugin's `topology` attribute of the node's whole-GPU groups, joined to their instances
    by `Locality.PciBusID` (the encoding: domain/topowire.py). None when no group carries one (the stock
    plugin publishes none: its GPUs are PCIe peers). A group whose attribute cannot be read adds nothing,
    with a warning; its GPUs stay placeable."""
    places: dict[InstanceId, GpuPlace] = {}
    found = False
    for group in devices:
        if not isinstance(group, Mapping) or group.get("Type") != "gpu":
            continue
        attr = (group.get("Attributes") or {}).get(topowire.ATTRIBUTE)
        value = attr.get("String") if isinstance(attr, Mapping) else None
        if not isinstance(value, str):
            continue
        found = True
        bus_of = {InstanceId(str(i["ID"])): bus for i in group.get("Instances") or []
                  if isinstance(i, Mapping) and i.get("ID") and (bus := _pci_bus_id(i))}
        try:
            places.update(topowire.to_topology(topowire.decode(value), bus_of).places)
        except InvalidInventory as exc:
            _skipped(f"node {node_id}: topology of device group {group.get('Name')!r} skipped: {exc}")
    return Topology.of(places) if found else None


def decode_alloc(raw: Mapping[str, Any]) -> AllocInfo:
    """A full allocation, an event payload's allocation, or a `?resources=true` stub."""
    try:
        status = AllocStatus(raw.get("ClientStatus") or "pending")
    except ValueError:
        status = AllocStatus.UNKNOWN
    device_ids: list[InstanceId] = []
    device_name: str | None = None
    cpu = mem = 0
    tasks = ((raw.get("AllocatedResources") or {}).get("Tasks")) or {}
    for task in tasks.values():
        task = task or {}
        cpu += int(((task.get("Cpu") or {}).get("CpuShares")) or 0)
        mem += int(((task.get("Memory") or {}).get("MemoryMB")) or 0)
        for dev in task.get("Devices") or []:
            device_ids.extend(InstanceId(str(i)) for i in dev.get("DeviceIDs") or [])
            device_name = device_name or dev.get("Name")
    if not raw.get("ID"):
        raise InvalidInventory("allocation JSON without ID")
    return AllocInfo(
        id=str(raw["ID"]), job_id=str(raw.get("JobID") or ""), task_group=str(raw.get("TaskGroup") or ""),
        node_id=NodeId(str(raw.get("NodeID") or "")), client_status=status,
        desired_status=str(raw.get("DesiredStatus") or "run"), device_ids=tuple(device_ids),
        device_name=device_name, cpu_mhz=cpu, memory_mb=mem, modify_index=int(raw.get("ModifyIndex") or 0),
        create_time_ns=int(raw.get("CreateTime") or 0), modify_time_ns=int(raw.get("ModifyTime") or 0),
        namespace=str(raw.get("Namespace") or "default"),
        next_allocation=str(raw.get("NextAllocation") or ""),
        migrate=bool((raw.get("DesiredTransition") or {}).get("Migrate")),
        job_version=int(raw.get("JobVersion") or 0),
        resources_known=isinstance(raw.get("AllocatedResources"), Mapping),
        exited_zero=exited_zero(raw.get("TaskStates")), stopped_zero=exited_zero(raw.get("TaskStates"), True),
        max_run_exceeded=raw.get("ClientDescription") == MAX_RUN_EXCEEDED,
        ports=_ports(raw.get("AllocatedResources")),
        preempted_by=str(raw.get("PreemptedByAllocation") or ""),
        killed=killed(raw.get("TaskStates")),
        desired_description=str(raw.get("DesiredDescription") or ""),
    )


def _ports(resources: Any) -> tuple[PortMapping, ...]:
    shared = resources.get("Shared") if isinstance(resources, Mapping) else None
    raw = shared.get("Ports") if isinstance(shared, Mapping) else None
    return tuple(PortMapping(str(p.get("Label") or ""), str(p.get("HostIP") or ""), int(p.get("Value") or 0))
                 for p in raw or () if isinstance(p, Mapping) and p.get("Value"))
