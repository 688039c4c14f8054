"""The Nomad side of each GPU kind when reading: which fingerprint device groups a kind claims, and how
their instances become the inventory the core sees.

Nomad reports a node's devices as groups (`NodeResources.Devices`: vendor, type, name, attributes,
instances; api/nodes.go `NodeDeviceResource`, v2.0.5). One decoder per kind claims the groups that are
its own: the project plugin's share instances (the share contract), MIG instances (`<model> MIG
<profile>`), whole GPUs (any other `gpu` group). A new kind registers its decoder with
`register_group_decoder`; it is asked before the built-ins, the whole-GPU decoder last, since that one
takes any `gpu` group. Like the rest of `nomad/`, this is where Nomad's field names live.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.inventory import Gpu, GpuMode, MigPlacementOf, MigSlice, Node
from nomad_gpu.domain.units import MigProfile, split_mig_device_name
from nomad_gpu.sharecontract import SHARE_SEP, SHARED_TYPE, SHARED_VENDOR, model_of_group, parse_share_id

if TYPE_CHECKING:
    from nomad_gpu.nomad.decode import SharingConfig

__all__ = ["Decoded", "DeviceGroup", "GroupDecoder", "group_decoder_for", "instance_id", "pci_bus_id",
           "register_group_decoder", "unregister_group_decoder"]


@dataclass(frozen=True)
class DeviceGroup:
    """One fingerprint device group, its fields read."""

    vendor: str
    dtype: str
    name: str
    memory: int
    """The `memory` attribute (MiB), 0 when absent."""
    instances: Sequence[Mapping[str, Any]]
    attributes: Mapping[str, Any] = field(default_factory=dict)
    """The group's attributes as Nomad sends them (`{String, Int, ...}` per name)."""


@dataclass
class Decoded:
    """What a group adds to a node: whole or stock-shared GPUs, GPUs of share instances, MIG instances."""

    gpus: list[Gpu] = field(default_factory=list)
    shared: list[Gpu] = field(default_factory=list)
    migs: list[MigSlice] = field(default_factory=list)


class GroupDecoder(Protocol):
    @property
    def kind(self) -> str:
        """The core's name of the kind (`domain.kinds`)."""
        ...

    def claims(self, group: DeviceGroup) -> bool: ...

    def decode(self, node: Node, group: DeviceGroup, sharing: SharingConfig, into: Decoded) -> None:
        """The group's instances into `into`; InvalidInventory for a group that cannot be read."""
        ...


class ShareGroups:
    """The project plugin's share instances: one `Gpu` per GPU UUID they map back to; its N slots are
    the instances found (the plugin keeps a vanished one listed, unhealthy)."""

    kind = "share"

    def claims(self, group: DeviceGroup) -> bool:
        return group.vendor == SHARED_VENDOR and group.dtype == SHARED_TYPE

    def decode(self, node: Node, group: DeviceGroup, sharing: SharingConfig, into: Decoded) -> None:
        name = group.name
        by_gpu: dict[str, list[tuple[int, InstanceId, bool]]] = {}
        bus_of: dict[str, str | None] = {}
        health_of: dict[str, str] = {}
        for inst in group.instances:
            iid = instance_id(inst, name)
            parsed = parse_share_id(iid)
            if parsed is None:
                raise InvalidInventory(f"device {name!r}: share instance ID {iid!r} is not <GPU uuid>{SHARE_SEP}<k>")
            uuid, k = parsed
            by_gpu.setdefault(uuid, []).append((k, iid, bool(inst.get("Healthy", True))))
            bus_of.setdefault(uuid, pci_bus_id(inst))
            if not inst.get("Healthy", True):
                health_of.setdefault(uuid, health_description(inst))
        model = model_of_group(name)
        for uuid, found in by_gpu.items():
            found.sort()
            into.shared.append(Gpu(InstanceId(uuid), model, group.memory, all(h for _, _, h in found), GpuMode.SHARED,
                                   len(found), share_ids=tuple(i for _, i, _ in found), share_device=name,
                                   pci_bus_id=bus_of[uuid], health=health_of.get(uuid, "")))


class MigGroups:
    """MIG instances, each its own device, in a group named `<model> MIG <profile>`."""

    kind = "mig"

    def claims(self, group: DeviceGroup) -> bool:
        return group.dtype == "gpu" and split_mig_device_name(group.name) is not None

    def decode(self, node: Node, group: DeviceGroup, sharing: SharingConfig, into: Decoded) -> None:
        name = group.name
        split = split_mig_device_name(name)
        assert split is not None  # claimed
        for inst in group.instances:
            iid = instance_id(inst, name)
            healthy = bool(inst.get("Healthy", True))
            try:
                profile = MigProfile.parse(split[1])
            except InvalidInventory as exc:
                raise InvalidInventory(f"device {name!r}: {exc}") from exc
            into.migs.append(MigSlice(iid, split[0], profile, group.memory, healthy, vendor=group.vendor,
                                      pci_bus_id=pci_bus_id(inst),
                                      placement=parse_mig_placement(group.attributes.get(MIG_ATTRIBUTE + iid)),
                                      health="" if healthy else health_description(inst)))


MIG_ATTRIBUTE = "mig."
_MIG_PLACEMENT = re.compile(r"^(?P<gpu>GPU-[0-9A-Za-z-]+)@(?P<start>\d)/(?P<size>\d)$")


def parse_mig_placement(attr: Any) -> MigPlacementOf | None:
    """The project plugin's `mig.<MIG-uuid> = "<GPU-uuid>@<start>/<size>"` attribute (a `{String}`), or None
    when absent or unreadable: the instance is then drawn without a placement, never refused."""
    value = attr.get("String") if isinstance(attr, Mapping) else None
    m = _MIG_PLACEMENT.match(value) if isinstance(value, str) else None
    return MigPlacementOf(m["gpu"], int(m["start"]), int(m["size"])) if m is not None else None


class WholeGroups:
    """Whole GPUs: any other `gpu` group, named by its model; the service's sharing rules may mark a
    stock-plugin GPU time-slice shared."""

    kind = "whole"

    def claims(self, group: DeviceGroup) -> bool:
        return group.dtype == "gpu"

    def decode(self, node: Node, group: DeviceGroup, sharing: SharingConfig, into: Decoded) -> None:
        name = group.name
        for inst in group.instances:
            iid = instance_id(inst, name)
            healthy = bool(inst.get("Healthy", True))
            if iid.startswith("MIG-"):
                raise InvalidInventory(f"MIG instance {iid} in a group named {name!r}")
            rule = sharing.rule_for(node, iid, name)
            mode = GpuMode.SHARED if rule is not None else GpuMode.WHOLE
            into.gpus.append(Gpu(iid, name, group.memory, healthy, mode, rule.slots if rule else None,
                                 vendor=group.vendor, pci_bus_id=pci_bus_id(inst),
                                 health="" if healthy else health_description(inst)))


_BUILTIN: tuple[GroupDecoder, ...] = (ShareGroups(), MigGroups(), WholeGroups())
_ADDED: list[GroupDecoder] = []


def register_group_decoder(decoder: GroupDecoder) -> GroupDecoder:
    """Add a kind's decoder, asked before the built-ins (idempotent for the same object)."""
    if decoder not in _ADDED:
        _ADDED.append(decoder)
    return decoder


def unregister_group_decoder(decoder: GroupDecoder) -> None:
    if decoder in _ADDED:
        _ADDED.remove(decoder)


def group_decoder_for(group: DeviceGroup) -> GroupDecoder | None:
    """The decoder of the first kind that claims the group; None: not a GPU group of ours (skipped)."""
    for decoder in (*_ADDED, *_BUILTIN):
        if decoder.claims(group):
            return decoder
    return None


def pci_bus_id(inst: Mapping[str, Any]) -> str | None:
    """`Instances[].Locality.PciBusID` (`NodeDevice.Locality *NodeDeviceLocality`, api/resources.go and
    nomad/structs/structs.go, v2.0.5): a pointer, so null or absent where a plugin sets none, and an empty
    string is none too. MIG instances carry their parent GPU's (reference/nomad-api.md section 5)."""
    locality = inst.get("Locality")
    bus = locality.get("PciBusID") if isinstance(locality, Mapping) else None
    return str(bus) if bus else None


def health_description(inst: Mapping[str, Any]) -> str:
    """`Instances[].HealthDescription` of an unhealthy instance (`NodeDevice`, nomad/structs/structs.go
    v2.0.5): the plugin's words, capped; "unhealthy" where it gives none."""
    text = inst.get("HealthDescription")
    return str(text)[:200] if isinstance(text, str) and text else "unhealthy"


def instance_id(inst: Mapping[str, Any], group: str) -> InstanceId:
    iid = inst.get("ID")
    if not iid:
        raise InvalidInventory(f"device {group!r} has an instance without ID")
    return InstanceId(str(iid))
