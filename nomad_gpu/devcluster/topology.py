"""The interconnect of a dev-cluster node, advertised as the project's device plugin advertises it.

A cluster file says per `gpus:` entry `nvlink: all` (an NVSwitch board: every pair of the entry's GPUs
joined), `nvlink: pairs` (GPU 2k bridged to 2k+1 in the entry's instance order, as PCIe A100s with
NVLink bridges are) or `nvlink: none` (the default), and per node `numa_nodes: N` (the node's GPUs split
evenly over N NUMA nodes in instance order). Nomad itself carries no topology: a device group has
attributes and an instance only ID, health and `HwLocality.PciBusID` (`DeviceGroup`, `Device`,
`DeviceLocality`, `plugins/device/device.go`), copied unchanged into the node's `NodeDeviceResource`
(`convertDeviceGroup`, `client/devicemanager/utils.go`; `NodeDevice.Locality`, `nomad/structs/structs.go`;
all v2.0.5). So only a node running the project's plugin (`device_plugin: nomad-gpu`) shows it, as the
plugin's string attribute `topology` on each whole-GPU group; the stock plugin's nodes show nothing.

The string is written here from the cluster file, not by the plugin's code (the dev cluster shares no
code with what it judges): `1;` then, per GPU sorted by PCI bus ID, `<bus>/<numa>/<switch>/<links>`,
`<links>` being `S` (on the NVSwitch fabric), `<k>*<n>` (n NVLinks to the k-th entry) or `-`. The cluster
file names no PCIe switches, so that figure is `-`, and no link counts, so a bridged pair shows a
nominal 4 (the service reads only whether NVLink joins two GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

BRIDGE_LINKS = 4


@dataclass(frozen=True)
class Placed:
    """One whole GPU of a node as the cluster file places it."""

    bus: str
    """Its PCI bus ID as the instance advertises it (`00000000:07:00.0`)."""
    numa: int
    fabric: bool
    """On the node's NVSwitch fabric (`nvlink: all`)."""
    bridged_to: str | None
    """The bus ID of the GPU it is bridged to (`nvlink: pairs`), if any."""


def numa_of(gpu_index: int, gpus: int, numa_nodes: int) -> int:
    """GPUs split evenly over the NUMA nodes in instance order: 8 GPUs on 2 nodes are 0-3 and 4-7."""
    return gpu_index * numa_nodes // max(gpus, 1)


def topology_string(gpus: list[Placed]) -> str:
    """The plugin's `topology` attribute for one whole-GPU group."""
    ordered = sorted(gpus, key=lambda g: _key(g.bus))
    position = {g.bus: k for k, g in enumerate(ordered)}
    entries = []
    for g in ordered:
        links = "S" if g.fabric else "-"
        if g.bridged_to is not None and g.bridged_to in position:
            links = f"{position[g.bridged_to]}*{BRIDGE_LINKS}"
        entries.append(f"{_key(g.bus)}/{g.numa}/-/{links}")
    return "1;" + " ".join(entries)


def _key(bus: str) -> str:
    domain, rest = bus.lower().split(":", 1)
    return f"{int(domain, 16):x}:{rest}"
