"""Nodes and their fingerprinted devices, and the Node JSON that Nomad serves for them.

A cluster file says "8 x A800"; Nomad's API says `NodeResources.Devices[]` groups with instances
and typed attributes. This module is the one translation between the two, so the shapes of
reference/nomad-api.md sections 4 and 5 live in one place:

- whole GPUs form one `nvidia/gpu/<model>` group per model (the plugin groups by Name, section 5);
- a MIG-enabled GPU is skipped and each MIG instance is advertised in a `<model> MIG <profile>` group
  with a `MIG-...` ID, sharing its parent's PciBusID (section 5, "MIG");
- on a node with `device_plugin: nomad-gpu`, a GPU marked `shared: true` with N `slots` is left out
  of `nvidia/gpu` and advertised as N share instances `<GPU uuid>-share-<k>` in the group
  `nomad-gpu/shared-gpu/<model>` (`<model> (<N> slots)` where one model has several slot counts on the
  node), with the project plugin's attributes (docs/node.md, "The share contract"); Nomad places them
  like any device (`plugins/device/device.go` DeviceGroup, `scheduler/feasible/device.go`, v2.0.5);
- on a node with the stock plugin (the default), every GPU is advertised whole, shared ones too: the
  stock plugin can hide a GPU only by dropping it entirely (`ignored_gpu_ids`, nomad-device-nvidia
  `fingerprint.go`), so sharing there is the service's advisory `sharing:` setting, and such GPUs are
  listed in `Node.shared_gpus` for the audit's share sums.

The device groups themselves (their attributes and JSON) are in `devices.py`.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from .config import ClusterSpec, NodeSpec, gpu_uuid, mig_uuid, node_id
from .devices import SHARE_SEP, SHARED_TYPE, SHARED_VENDOR, DeviceGroup, DeviceInstance, mig_groups
from .events import Event
from .miglayout import Instance as MigInstance
from .miglayout import MigGpu, arrange
from .topology import Placed, numa_of, topology_string

__all__ = ["NOMAD_VERSION", "SHARED_TYPE", "SHARED_VENDOR", "SHARE_SEP", "DeviceGroup", "DeviceInstance", "Node",
           "build_nodes", "mig_groups", "refingerprint_mig"]

NOMAD_VERSION = "2.0.5"


@dataclass
class Node:
    """A node as the dev cluster's server sees it; status fields change, capacity does not."""

    id: str
    name: str
    datacenter: str
    node_pool: str
    node_class: str
    cpu_shares: int
    memory_mb: int
    disk_mb: int
    reserved_cpu_shares: int
    reserved_memory_mb: int
    meta: dict[str, str]
    address: str
    groups: tuple[DeviceGroup, ...]
    shared_gpus: tuple[str, ...] = ()
    """GPUs marked shared on a stock-plugin node: advertised whole, shared only by the advisory setting."""
    device_plugin: str = "nvidia"
    """`nvidia` (the stock plugin) or `nomad-gpu` (the project's), from the cluster file."""
    drivers: dict[str, bool] = field(default_factory=lambda: {"docker": True, "exec": True, "raw_exec": True})
    host_volumes: tuple[str, ...] = ()
    mig_gpus: list[MigGpu] = field(default_factory=list)
    """The node's MIG-mode GPUs and their instances as they are on the node (devcluster/miglayout.py);
    `groups` shows them as Nomad last fingerprinted them."""
    mig_fingerprint_delay_s: float | str | None = None
    unhealthy: dict[str, str] = field(default_factory=dict)
    """Instance ID -> HealthDescription of each instance the plugin reports unhealthy (devicehealth.py)."""
    health_log: list[dict[str, Any]] = field(default_factory=list)
    """Each unhealthy spell of an instance, for the audit: unhealthy_at, healthy_at (None while it lasts)."""
    version: str = NOMAD_VERSION  # the Nomad release the cluster plays
    status: str = "ready"
    eligibility: str = "eligible"
    drain_strategy: dict[str, Any] | None = None
    drain_epoch: int = 0
    last_drain: dict[str, Any] | None = None
    status_updated_at: int = field(default_factory=lambda: int(time.time()))
    create_index: int = 0
    modify_index: int = 0

    @property
    def usable_cpu(self) -> int:
        return self.cpu_shares - self.reserved_cpu_shares

    @property
    def usable_memory(self) -> int:
        return self.memory_mb - self.reserved_memory_mb

    @property
    def schedulable(self) -> bool:
        return self.status == "ready" and self.eligibility == "eligible"

    def event(self, kind: str) -> Event:
        """A Node-topic event: no namespace, no FilterKeys (reference section 1)."""
        return Event("Node", kind, self.id, "", None, self.modify_index, {"Node": self.to_json()})

    def set_drain(self, drain: bool, now: float, deadline_s: float = 3600.0) -> None:
        """Drain on: a DrainStrategy and `ineligible`; off: neither (`Drain` follows DrainStrategy).
        Each drain gets a new epoch, so a deadline timer of an earlier drain does nothing."""
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        force = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + deadline_s))
        self.drain_strategy = ({"Deadline": int(deadline_s * 10**9), "ForceDeadline": force,
                                "IgnoreSystemJobs": False, "StartedAt": started} if drain else None)
        self.eligibility = "ineligible" if drain else "eligible"
        self.drain_epoch += 1

    def finish_drain(self, now: float) -> None:
        """A drain that is done: no DrainStrategy, the node stays ineligible, LastDrain says so
        (`nomad/drainer/drainer.go`, `nomad/structs/structs.go` DrainMetadata, v2.0.5)."""
        started = self.drain_strategy["StartedAt"] if self.drain_strategy else ""
        self.drain_strategy = None
        self.last_drain = {"StartedAt": started, "UpdatedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                           "Status": "complete", "AccessorID": "", "Meta": None}

    def healthy(self, instance_id: str) -> bool:
        return instance_id not in self.unhealthy

    def computed_key(self) -> str:
        return f"{self.datacenter}/{self.node_pool}/{self.node_class}/{[g.name for g in self.groups]}"

    def attributes(self) -> dict[str, str]:
        cores = max(1, self.cpu_shares // 2000)
        return {
            "unique.hostname": self.name,
            "unique.network.ip-address": self.address,
            "nomad.version": self.version,
            "nomad.advertise.address": f"{self.address}:4646",
            "os.name": "ubuntu",
            "os.version": "22.04",
            "kernel.name": "linux",
            "cpu.arch": "amd64",
            "cpu.numcores": str(cores),
            "cpu.totalcompute": str(self.cpu_shares),
            "memory.totalbytes": str(self.memory_mb * 1024 * 1024),
            **{f"driver.{name}": "1" for name, healthy in sorted(self.drivers.items()) if healthy},
        }

    def resources_json(self) -> dict[str, Any]:
        return {
            "Cpu": {"CpuShares": self.cpu_shares, "TotalCpuCores": max(1, self.cpu_shares // 2000),
                    "ReservableCpuCores": None},
            "Memory": {"MemoryMB": self.memory_mb},
            "Disk": {"DiskMB": self.disk_mb},
            # the host network group ports are assigned on (`NetworkIndex.SetNode`, nomad/structs/network.go
            # v2.0.5): fingerprinted from the default interface, its address the node's
            "Networks": [{"Mode": "host", "Device": "eth0", "CIDR": f"{self.address}/32", "IP": self.address,
                          "MBits": 1000, "DNS": None, "ReservedPorts": None, "DynamicPorts": None, "CNI": None}],
            "NodeNetworks": [{"Mode": "host", "Device": "eth0", "MacAddress": "", "Speed": 1000, "Addresses": [
                {"Family": "ipv4", "Alias": "default", "Address": self.address, "ReservedPorts": "", "Gateway": ""}]}],
            "MinDynamicPort": 20000,
            "MaxDynamicPort": 32000,
            "Devices": [group.to_json(self.unhealthy) for group in self.groups] or None,
        }

    def reserved_json(self) -> dict[str, Any]:
        return {
            "Cpu": {"CpuShares": self.reserved_cpu_shares, "ReservedCpuCores": None},
            "Memory": {"MemoryMB": self.reserved_memory_mb},
            "Disk": {"DiskMB": 0},
            "Networks": {"ReservedHostPorts": ""},
        }

    def host_volumes_json(self) -> dict[str, Any] | None:
        """`Node.HostVolumes` (`ClientHostVolumeConfig`: Name, Path, ReadOnly; `nomad/structs`, v2.0.5)."""
        if not self.host_volumes:
            return None
        return {name: {"Name": name, "Path": f"/opt/nomad/volumes/{name}", "ReadOnly": False}
                for name in self.host_volumes}

    def drivers_json(self) -> dict[str, Any]:
        return {
            name: {"Attributes": None, "Detected": True, "Healthy": healthy,
                   "HealthDescription": "Healthy" if healthy else "Unhealthy", "UpdateTime": "2026-01-01T00:00:00Z"}
            for name, healthy in sorted(self.drivers.items())
        }

    def to_json(self) -> dict[str, Any]:
        """The full node (`GET /v1/node/:id` and event payloads; SecretID blanked as in events)."""
        return {
            "ID": self.id,
            "SecretID": "",
            "Datacenter": self.datacenter,
            "Name": self.name,
            "HTTPAddr": f"{self.address}:4646",
            "TLSEnabled": False,
            "Attributes": self.attributes(),
            "NodeResources": self.resources_json(),
            "ReservedResources": self.reserved_json(),
            "Resources": None,
            "Reserved": None,
            "Links": {},
            "Meta": dict(self.meta),
            "NodeClass": self.node_class,
            "NodePool": self.node_pool,
            "ComputedClass": "v1:" + str(int(hashlib.sha1(self.computed_key().encode()).hexdigest()[:15], 16)),
            # `Drain` is computed from DrainStrategy by the JSON extension (reference section 4).
            "Drain": self.drain_strategy is not None,
            "DrainStrategy": self.drain_strategy,
            "SchedulingEligibility": self.eligibility,
            "Status": self.status,
            "StatusDescription": "",
            "StatusUpdatedAt": self.status_updated_at,  # Unix seconds (reference section 4)
            "Events": [{"Message": "Node registered", "Subsystem": "Cluster", "Details": None,
                        "Timestamp": "2026-01-01T00:00:00Z", "CreateIndex": 0}],
            "Drivers": self.drivers_json(),
            "HostVolumes": self.host_volumes_json(),
            "HostNetworks": None,
            "CSIControllerPlugins": None,
            "CSINodePlugins": None,
            "LastDrain": self.last_drain,
            "CreateIndex": self.create_index,
            "ModifyIndex": self.modify_index,
        }

    def stub_json(self, *, resources: bool = False, os_attr: bool = False) -> dict[str, Any]:
        """`GET /v1/nodes` entry; `resources` adds NodeResources + ReservedResources, `os_attr`
        adds only `Attributes{"os.name"}` (reference section 4, list stub)."""
        stub: dict[str, Any] = {
            "Address": self.address,
            "ID": self.id,
            "Attributes": {"os.name": "ubuntu"} if os_attr else None,
            "Datacenter": self.datacenter,
            "Name": self.name,
            "NodeClass": self.node_class,
            "NodePool": self.node_pool,
            "Version": self.version,
            "Drain": self.drain_strategy is not None,
            "SchedulingEligibility": self.eligibility,
            "Status": self.status,
            "StatusDescription": "",
            "Drivers": self.drivers_json(),
            "HostVolumes": self.host_volumes_json(),
            "LastDrain": self.last_drain,
            "CreateIndex": self.create_index,
            "ModifyIndex": self.modify_index,
        }
        if resources:
            stub["NodeResources"] = self.resources_json()
            stub["ReservedResources"] = self.reserved_json()
        return stub


def build_nodes(cluster: ClusterSpec) -> list[Node]:
    """Turn the cluster file into nodes with deterministic IDs, in file order."""
    return [_build_node(cluster, spec, position) for position, spec in enumerate(cluster.nodes)]


def _build_node(cluster: ClusterSpec, spec: NodeSpec, position: int) -> Node:
    whole: dict[str, list[DeviceInstance]] = {}
    mig_gpus: list[MigGpu] = []
    shared: dict[tuple[str, int], list[DeviceInstance]] = {}
    advisory: list[str] = []
    memory: dict[tuple[str, str], int] = {}
    plugin = spec.device_plugin == "nomad-gpu"
    placed: dict[str, list[Placed]] = {}
    total = sum(entry.count for entry in spec.gpus)
    gpu_index = 0
    for entry in spec.gpus:
        for k in range(entry.count):
            bus = f"00000000:{0x07 + gpu_index * 0x10 & 0xFF:02X}:00.0"
            if entry.mig is not None:
                # The parent of a MIG-enabled GPU is skipped; each instance is its own device, placed by
                # the cluster file's rule (devcluster/miglayout.py; the file was checked to have one).
                layout = arrange(entry.mig, entry.memory_mib) or []
                mig_gpus.append(MigGpu(gpu_uuid(cluster, spec, gpu_index), entry.model, entry.memory_mib, bus, [
                    MigInstance(mig_uuid(cluster, spec, gpu_index, slot), profile, start, size)
                    for slot, (profile, start, size) in enumerate(layout)]))
            elif entry.shared and plugin and entry.slots is not None:
                uuid = gpu_uuid(cluster, spec, gpu_index)
                shared.setdefault((entry.model, entry.slots), []).extend(
                    DeviceInstance(f"{uuid}{SHARE_SEP}{k}", bus) for k in range(entry.slots))
                memory.setdefault(("shared", entry.model), entry.memory_mib)
            else:
                uuid = gpu_uuid(cluster, spec, gpu_index)
                whole.setdefault(entry.model, []).append(DeviceInstance(uuid, bus))
                partner = gpu_index + 1 if k % 2 == 0 else gpu_index - 1
                placed.setdefault(entry.model, []).append(Placed(
                    bus, numa_of(gpu_index, total, spec.numa_nodes), entry.nvlink == "all",
                    f"00000000:{0x07 + partner * 0x10 & 0xFF:02X}:00.0" if entry.nvlink == "pairs" else None))
                memory.setdefault(("gpu", entry.model), entry.memory_mib)
                if entry.shared:
                    advisory.append(uuid)
            gpu_index += 1
    # Only the project's plugin publishes the topology (devcluster/topology.py).
    groups = [DeviceGroup("nvidia", "gpu", name, memory[("gpu", name)], tuple(ids), project_plugin=plugin,
                          topology=topology_string(placed[name]) if plugin else None)
              for name, ids in whole.items()]
    groups += mig_groups(mig_gpus, plugin)
    counts: dict[str, int] = {}
    for model, _ in shared:
        counts[model] = counts.get(model, 0) + 1
    groups += [DeviceGroup(SHARED_VENDOR, SHARED_TYPE, model if counts[model] == 1 else f"{model} ({slots} slots)",
                           memory[("shared", model)], tuple(ids), slots)
               for (model, slots), ids in shared.items()]
    return Node(
        id=node_id(cluster, spec),
        name=spec.name,
        datacenter=spec.datacenter,
        node_pool=spec.node_pool,
        node_class=spec.node_class,
        cpu_shares=spec.cpu_shares,
        memory_mb=spec.memory_mb,
        disk_mb=spec.disk_mb,
        reserved_cpu_shares=spec.reserved_cpu_shares,
        reserved_memory_mb=spec.reserved_memory_mb,
        meta=dict(spec.meta),
        address=f"10.0.{position // 250}.{position % 250 + 2}",
        groups=tuple(groups),
        shared_gpus=tuple(advisory),
        device_plugin=spec.device_plugin,
        drivers=dict(spec.drivers),
        host_volumes=tuple(spec.host_volumes),
        mig_gpus=mig_gpus,
        mig_fingerprint_delay_s=spec.mig_fingerprint_delay_s,
    )


def refingerprint_mig(node: Node) -> None:
    """Replace the node's MIG groups by what its GPUs have now (whole GPUs first, shares last, as built)."""
    mig_names = {g.name for g in node.groups if g.vendor == "nvidia" and " MIG " in g.name}
    whole = [g for g in node.groups if g.vendor == "nvidia" and g.name not in mig_names]
    rest = [g for g in node.groups if g.vendor != "nvidia"]
    node.groups = tuple(whole + mig_groups(node.mig_gpus, node.device_plugin == "nomad-gpu") + rest)
