"""The `topology` attribute of a whole-GPU group: where each of its GPUs sits, keyed by PCI bus ID.

Nomad gives a device instance only an ID, health and a PCI bus ID, and a group one set of attributes
(`plugins/device/device.go` v2.0.5), so the node's NVLink pairs, NVSwitch fabric, NUMA nodes and PCIe
switches travel as one string attribute per group, in the format of `nomad_gpu.domain.topowire`
(129 to 145 characters for 8 GPUs). The stock NVIDIA plugin publishes nothing of the kind; the service
then treats its GPUs as PCIe peers.
"""

from __future__ import annotations

from collections.abc import Iterable

from nomad_gpu.domain import topowire
from nomad_gpu.nvml import Inventory
from nomad_gpu.nvml.links import places

ATTRIBUTE = topowire.ATTRIBUTE


def topology_attribute(inventory: Inventory, gpu_uuids: Iterable[str]) -> str | None:
    """The attribute's value for a group of these whole GPUs; None when NVML gave no place for any of
    them (links not read, or every GPU lost). Peers outside the group are left out."""
    wanted = set(gpu_uuids)
    where = places(inventory)
    bus = {g.uuid: g.pci_bus_id for g in inventory.gpus if g.uuid in wanted and g.uuid in where and g.pci_bus_id}
    if not bus:
        return None
    rows = []
    for uuid, pci in sorted(bus.items()):
        p = where[uuid]
        peers = tuple((bus[peer], links) for peer, links in p.peers if peer in bus)
        rows.append(topowire.WirePlace(pci, p.numa, p.switch, p.nvswitch, peers))
    return topowire.encode(rows)
