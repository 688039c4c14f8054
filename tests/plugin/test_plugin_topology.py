"""The plugin publishes the node's topology in each whole-GPU group, and the service reads it back."""

from __future__ import annotations

from typing import Any

from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.topology import LinkClass
from nomad_gpu.nomad.decode import decode_node
from nomad_gpu.nvml import FakeNvml
from nomad_gpu.nvml.fake import FakeGpu, FakeNode
from nomad_gpu.nvml.layouts import a800x8, h100_mig
from nomad_gpu.plugin.config import PluginConfig
from nomad_gpu.plugin.devices import Group
from nomad_gpu.plugin.state import NodeState

A100 = "NVIDIA A100 80GB PCIe"


def pairs_node() -> FakeNode:
    bus = [f"00000000:{0x17 + 0x10 * k:02X}:00.0" for k in range(8)]
    return FakeNode(gpus=tuple(
        FakeGpu(name=A100, memory_mib=81920, bus_id=bus[k], mig=(False, False), numa=k // 4, pcie_switch=k // 2,
                nvlink_peers=(bus[k ^ 1],) * 4)
        for k in range(8))).with_ids()


def groups(node: FakeNode, **config: object) -> list[Group]:
    state = NodeState(FakeNvml(node))
    state.configure(PluginConfig(**config))  # type: ignore[arg-type]
    return state.refresh()


def as_node_json(found: list[Group]) -> dict[str, Any]:
    """What Nomad's API shows for these groups (`convertDeviceGroup`, client/devicemanager/utils.go v2.0.5)."""
    def attr(value: object, unit: str) -> dict[str, Any]:
        kind = {bool: "Bool", int: "Int", float: "Float", str: "String"}[type(value)]
        return {"Float": None, "Int": None, "String": None, "Bool": None, kind: value, "Unit": unit}
    devices = [{"Vendor": g.vendor, "Type": g.type, "Name": g.name,
                "Attributes": {n: attr(v, u) for n, v, u in g.attributes},
                "Instances": [{"ID": i.id, "Healthy": i.healthy, "HealthDescription": i.health,
                               "Locality": {"PciBusID": i.pci_bus_id}} for i in g.instances]} for g in found]
    return {"ID": "n1", "Name": "a100-pairs", "Status": "ready", "NodeResources": {"Devices": devices}}


def test_pairs_on_two_sockets_travel_to_the_service() -> None:
    node = pairs_node()
    (group,) = groups(node)
    value = dict((n, v) for n, v, _ in group.attributes)["topology"]
    assert isinstance(value, str) and value.startswith("1;0:17:00.0/0/0/1*4 0:27:00.0/0/0/0*4 ")
    assert len(value) < 160
    topology = decode_node(as_node_json([group])).topology
    gpu = [InstanceId(g.uuid) for g in node.gpus]
    assert topology is not None
    assert topology.link_class(gpu[0:4]) is LinkClass.NVLINK
    assert topology.link_class(gpu[1:3]) is LinkClass.NUMA
    assert topology.link_class(gpu[3:5]) is LinkClass.SYSTEM
    assert len(topology.nvlink_groups()) == 4


def test_the_nvswitch_board_is_one_group_and_shared_gpus_leave_it() -> None:
    node = a800x8().with_ids()
    found = groups(node, shared_gpus={node.gpus[0].uuid: 4})
    topology = decode_node(as_node_json(found)).topology
    assert topology is not None
    assert topology.nvlink_groups() == [tuple(sorted(InstanceId(g.uuid) for g in node.gpus[1:]))]
    share_group = next(g for g in found if g.vendor == "nomad-gpu")
    assert "topology" not in {n for n, _, _ in share_group.attributes}


def test_mig_groups_carry_no_topology() -> None:
    found = groups(h100_mig().with_ids())
    assert [g.name for g in found if "topology" in {n for n, _, _ in g.attributes}] == ["NVIDIA H100 80GB HBM3"]
