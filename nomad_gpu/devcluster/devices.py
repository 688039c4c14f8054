"""The device groups a node advertises: one `NodeResources.Devices[]` entry each, with its instances and
the typed attributes the stock plugin or the project's plugin sends.

It exists apart from `inventory.py` (which builds nodes from the cluster file) because a group's
shape is asked for on its own: placement and usage read groups, and a MIG re-layout rebuilds a node's
MIG groups (`mig_groups`) long after the node was built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .miglayout import Instance as MigInstance
from .miglayout import MigGpu
from .migprofiles import mig_memory_mib

SHARED_VENDOR = "nomad-gpu"
SHARED_TYPE = "shared-gpu"
SHARE_SEP = "-share-"
_DRIVER_VERSION = "550.54.15"


@dataclass(frozen=True)
class DeviceInstance:
    id: str
    pci_bus_id: str


@dataclass(frozen=True)
class DeviceGroup:
    """One entry of `NodeResources.Devices`: instances that share vendor, type and name."""

    vendor: str
    type: str
    name: str
    memory_mib: int
    instances: tuple[DeviceInstance, ...]
    slots: int | None = None
    """Share instances per GPU, for the project plugin's share group; None for nvidia groups."""
    project_plugin: bool = False
    """Advertised by the project's plugin, which sends only `memory` and `driver_version` for
    nvidia/gpu groups (nomad_gpu/plugin/devices.py), not the stock plugin's clocks, power and bar1."""
    topology: str | None = None
    placements: tuple[tuple[str, str], ...] = ()
    """The project plugin's `mig.<MIG-uuid>` = `<GPU-uuid>@<start>/<size>` attributes of a MIG group
    (nomad_gpu/plugin/migplacement.py): where each instance sits."""
    """The project plugin's `topology` attribute of a whole-GPU group (devcluster/topology.py)."""

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(instance.id for instance in self.instances)

    def share_hold(self, ids: tuple[str, ...]) -> tuple[str, int] | None:
        """For share instances of this group: (their GPU, the milli-GPU they stand for: k x 1000/N).
        None for other groups, or instances of more than one GPU (which no share should get)."""
        if self.slots is None or not ids:
            return None
        gpus = {i.rpartition(SHARE_SEP)[0] for i in ids}
        if len(gpus) != 1:
            return None
        return gpus.pop(), len(ids) * 1000 // self.slots

    def attributes(self) -> dict[str, dict[str, Any]]:
        """Typed attributes; unset value keys are null, as the server-side struct has no omitempty
        (reference section 4, `NodeResources`). The project plugin's share group carries its own:
        memory, slots, milli_per_slot, mps and driver_version (nomad_gpu/plugin/devices.py)."""
        if self.slots is not None:
            return {
                "memory": _attr(integer=self.memory_mib, unit="MiB"),
                "slots": _attr(integer=self.slots),
                "milli_per_slot": _attr(integer=1000 // self.slots),
                "mps": {"Float": None, "Int": None, "String": None, "Bool": False, "Unit": ""},
                "driver_version": _attr(string=_DRIVER_VERSION),
            }
        if self.project_plugin:
            attrs = {"memory": _attr(integer=self.memory_mib, unit="MiB"),
                     "driver_version": _attr(string=_DRIVER_VERSION)}
            if self.topology is not None:
                attrs["topology"] = _attr(string=self.topology)
            attrs.update((f"mig.{iid}", _attr(string=value)) for iid, value in self.placements)
            return attrs
        return {
            "memory": _attr(integer=self.memory_mib, unit="MiB"),
            "bar1": _attr(integer=131072, unit="MiB"),
            "power": _attr(integer=63, unit="W"),
            "cores_clock": _attr(integer=1410, unit="MHz"),
            "memory_clock": _attr(integer=1593, unit="MHz"),
            "pci_bandwidth": _attr(integer=32768, unit="MB/s"),
            "driver_version": _attr(string=_DRIVER_VERSION),
            "display_state": _attr(string="Disabled"),
            "persistence_mode": _attr(string="Enabled"),
        }

    def to_json(self, unhealthy: dict[str, str] | None = None) -> dict[str, Any]:
        """`unhealthy`: instance ID -> the plugin's description (devicehealth.py); every other instance is
        healthy with an empty description (reference section 5)."""
        sick = unhealthy or {}
        return {
            "Vendor": self.vendor,
            "Type": self.type,
            "Name": self.name,
            "Attributes": self.attributes(),
            "Instances": [
                {"ID": i.id, "Healthy": i.id not in sick, "HealthDescription": sick.get(i.id, ""),
                 "Locality": {"PciBusID": i.pci_bus_id}}
                for i in self.instances
            ],
        }


def _attr(*, integer: int | None = None, string: str | None = None, unit: str = "") -> dict[str, Any]:
    return {"Float": None, "Int": integer, "String": string, "Bool": None, "Unit": unit}


def mig_groups(gpus: list[MigGpu], plugin: bool) -> list[DeviceGroup]:
    """One `<model> MIG <profile>` group per profile, instances in GPU order; with the project's plugin,
    each instance's placement as an attribute."""
    found: dict[str, list[tuple[MigGpu, MigInstance]]] = {}
    for gpu in gpus:
        for inst in gpu.instances:
            found.setdefault(f"{gpu.model} MIG {inst.profile}", []).append((gpu, inst))
    return [DeviceGroup("nvidia", "gpu", name, mig_memory_mib(pairs[0][1].profile, pairs[0][0].memory_mib),
                        tuple(DeviceInstance(i.id, g.bus) for g, i in pairs), project_plugin=plugin,
                        placements=tuple((i.id, f"{g.uuid}@{i.start}/{i.size}") for g, i in pairs) if plugin else ())
            for name, pairs in found.items()]
