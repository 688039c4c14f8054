"""What the plugin advertises: NVML's GPUs and MIG devices, and share instances of shared GPUs, as device groups.

Conventions follow the stock nvidia plugin so that existing jobspecs keep working: whole GPUs are
`nvidia/gpu/<NVML name>` under their `GPU-…` UUID, MIG devices `nvidia/gpu/<model> MIG <profile>` under
their `MIG-…` UUID, with a `memory` attribute in MiB. A GPU the operator marks shared with N slots is
left out of `nvidia/gpu` entirely (so a plain job can never take it whole) and appears as N share
instances `<GPU uuid>-share-<k>` in its own group `nomad-gpu/shared-gpu/<model>` with a `slots`
attribute: a slot is 1000/N milli-GPU, and a share of M milli takes ceil(M / slot) instances of one GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from nomad_gpu import sharecontract
from nomad_gpu.nvml import Gpu, Inventory, NvmlUnavailable
from nomad_gpu.plugin.config import PluginConfig
from nomad_gpu.plugin.migplacement import placement_attribute
from nomad_gpu.plugin.topology import ATTRIBUTE as TOPOLOGY
from nomad_gpu.plugin.topology import topology_attribute
from nomad_gpu.sharecontract import SHARED_TYPE as SHARED_TYPE  # the plugin's side of the contract, re-exported
from nomad_gpu.sharecontract import SHARED_VENDOR as SHARED_VENDOR
from nomad_gpu.sharecontract import group_name
from nomad_gpu.sharecontract import share_id as share_id

NVIDIA_VENDOR, GPU_TYPE = "nvidia", "gpu"

AttrValue = int | float | str | bool


class Kind(StrEnum):
    GPU = "gpu"
    MIG = "mig"
    SHARE = "share"


def parse_share_id(device_id: str) -> tuple[str, int] | None:
    """`GPU-…-share-3` -> (`GPU-…`, 3); anything else -> None. The GPU UUID is what the ID maps back to."""
    parsed = sharecontract.parse_share_id(device_id)
    return parsed if parsed is not None and parsed[0].startswith("GPU-") else None


@dataclass(frozen=True)
class Instance:
    id: str
    kind: Kind
    gpu_uuid: str
    """The physical GPU."""
    visible: str
    """What NVIDIA_VISIBLE_DEVICES takes for it: the GPU's or the MIG device's UUID."""
    gpu_index: int
    healthy: bool
    health: str
    pci_bus_id: str | None = None
    slots: int | None = None
    gpu_memory_mib: int | None = None


@dataclass(frozen=True)
class Group:
    vendor: str
    type: str
    name: str
    attributes: tuple[tuple[str, AttrValue, str], ...]
    """(name, value, unit); the unit is "" for strings and bools, as Nomad requires."""
    instances: tuple[Instance, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.vendor, self.type, self.name


def gpu_health(gpu: Gpu, sticky: Mapping[str, str]) -> str:
    """Why a GPU is unhealthy ("" when it is healthy)."""
    if gpu.lost:
        return "GPU fell off the bus (NVML: GPU is lost); needs a reset"
    if gpu.uuid in sticky:
        return sticky[gpu.uuid]
    if gpu.mig_mode is not None and gpu.mig_mode.changing:
        return "MIG mode change is pending a GPU reset"
    if gpu.error:
        return f"NVML read failed: {gpu.error}"
    return ""


def build_groups(inventory: Inventory | NvmlUnavailable, config: PluginConfig,
                 sticky: Mapping[str, str]) -> list[Group]:
    """Device groups for one NVML read. `sticky` maps a GPU or MIG UUID to a lasting fault (an XID)."""
    if not config.enabled or isinstance(inventory, NvmlUnavailable):
        return []
    driver: tuple[tuple[str, AttrValue, str], ...] = (
        (("driver_version", inventory.driver_version, ""),) if inventory.driver_version else ())
    buckets: dict[tuple[str, str, str], list[Instance]] = defaultdict(list)
    memory: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    slots_of: dict[tuple[str, str, str], int] = {}
    placements: dict[tuple[str, str, str], list[tuple[str, AttrValue, str]]] = defaultdict(list)
    shared_models: dict[str, set[int]] = defaultdict(set)
    for gpu in inventory.gpus:
        slots = config.slots_for(gpu.uuid, gpu.index)
        if slots and not gpu.mig_enabled and gpu.uuid not in config.ignored_gpu_ids:
            shared_models[gpu.name].add(slots)
    for gpu in inventory.gpus:
        if gpu.uuid in config.ignored_gpu_ids:
            continue
        health = gpu_health(gpu, sticky)
        if gpu.mig_enabled:
            if not config.mig:
                continue
            for mig in gpu.migs:
                key = (NVIDIA_VENDOR, GPU_TYPE, mig.name)
                why = health or sticky.get(mig.uuid, "")
                buckets[key].append(Instance(mig.uuid, Kind.MIG, gpu.uuid, mig.uuid, gpu.index, not why, why,
                                             gpu.pci_bus_id))
                if mig.memory_total_mib is not None:
                    memory[key].append(mig.memory_total_mib)
                placed = placement_attribute(gpu, mig)
                if placed is not None:
                    placements[key].append(placed)
            continue
        slots = config.slots_for(gpu.uuid, gpu.index)
        if slots:
            name = group_name(gpu.name, slots, mixed=len(shared_models[gpu.name]) > 1)
            key = (SHARED_VENDOR, SHARED_TYPE, name)
            slots_of[key] = slots
            for k in range(slots):
                buckets[key].append(Instance(share_id(gpu.uuid, k), Kind.SHARE, gpu.uuid, gpu.uuid, gpu.index,
                                             not health, health, gpu.pci_bus_id, slots, gpu.memory_total_mib))
        elif config.whole_gpus:
            key = (NVIDIA_VENDOR, GPU_TYPE, gpu.name)
            buckets[key].append(Instance(gpu.uuid, Kind.GPU, gpu.uuid, gpu.uuid, gpu.index, not health, health,
                                         gpu.pci_bus_id))
        else:
            continue
        if gpu.memory_total_mib is not None:
            memory[key].append(gpu.memory_total_mib)
    groups = []
    for key in sorted(buckets):
        attrs: list[tuple[str, AttrValue, str]] = []
        if memory[key]:
            attrs.append(("memory", min(memory[key]), "MiB"))  # one value per attribute: the smallest
        if key in slots_of:
            attrs.append(("slots", slots_of[key], ""))
            attrs.append(("milli_per_slot", 1000 // slots_of[key], ""))
            attrs.append(("mps", bool(config.mps_pipe_directory), ""))
        attrs.extend(driver)
        if key[:2] == (NVIDIA_VENDOR, GPU_TYPE):
            topology = topology_attribute(inventory, (i.gpu_uuid for i in buckets[key] if i.kind is Kind.GPU))
            if topology is not None:
                attrs.append((TOPOLOGY, topology, ""))
        attrs.extend(placements[key])
        groups.append(Group(*key, attributes=tuple(attrs), instances=tuple(buckets[key])))
    return groups


def carry_vanished(previous: Iterable[Group], current: list[Group], reason: str) -> list[Group]:
    """Keep devices advertised before but missing now, marked unhealthy with `reason`.

    Each fingerprint replaces Nomad's whole device list; a GPU that drops out of NVML must turn
    unhealthy (allocations on it are visible as such), not silently vanish and reappear under load.
    """
    seen = {i.id for g in current for i in g.instances}
    out = {g.key: g for g in current}
    for old in previous:
        gone = tuple(replace(i, healthy=False, health=reason) for i in old.instances if i.id not in seen)
        if not gone:
            continue
        if old.key in out:
            g = out[old.key]
            out[old.key] = replace(g, instances=g.instances + gone)
        else:
            out[old.key] = replace(old, instances=gone)
    return [out[k] for k in sorted(out)]


def index_instances(groups: Iterable[Group]) -> dict[str, Instance]:
    return {i.id: i for g in groups for i in g.instances}
