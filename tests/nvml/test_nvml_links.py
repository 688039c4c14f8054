"""The topology read from NVML: NVLink peers and link counts, the NVSwitch fabric, NUMA nodes, PCIe switches."""

from __future__ import annotations

from dataclasses import replace

from nomad_gpu.nvml import FakeNvml, Inventory, read_inventory
from nomad_gpu.nvml.fake import FakeGpu, FakeNode
from nomad_gpu.nvml.layouts import a800x8, h200
from nomad_gpu.nvml.links import Place, places
from nomad_gpu.nvml.reader import NvmlReader

A100 = "NVIDIA A100 80GB PCIe"


def bus(k: int) -> str:
    return f"00000000:{0x17 + 0x10 * k:02X}:00.0"


def pairs_node(n: int = 8, *, numa_ids: bool = True) -> FakeNode:
    """PCIe A100s with NVLink bridges: GPU 2k bridged (4 links) to 2k+1; two sockets; one switch per pair."""
    return FakeNode(gpus=tuple(
        FakeGpu(name=A100, memory_mib=81920, bus_id=bus(k), mig=(False, False), numa=k * 2 // n, pcie_switch=k // 2,
                nvlink_peers=(bus(k ^ 1),) * 4)
        for k in range(n)), numa_ids=numa_ids)


def read(node: FakeNode) -> Inventory:
    inv = read_inventory(FakeNvml(node))
    assert isinstance(inv, Inventory), inv
    return inv


def test_bridged_pairs_on_two_sockets() -> None:
    inv = read(pairs_node())
    u = [g.uuid for g in inv.gpus]
    got = places(inv)
    assert got[u[0]] == Place(0, 0, False, ((u[1], 4),))
    assert got[u[3]] == Place(0, 1, False, ((u[2], 4),))
    assert got[u[6]] == Place(1, 3, False, ((u[7], 4),))
    assert [g.numa_node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert not inv.nvswitch and not any(g.nvswitch for g in inv.gpus)


def test_nvswitch_board_every_gpu_on_the_fabric() -> None:
    inv = read(a800x8())
    got = places(inv)
    assert inv.nvswitch and all(p.nvswitch and p.peers == () for p in got.values())
    assert [got[g.uuid].numa for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [got[g.uuid].switch for g in inv.gpus] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_numa_from_the_pcie_paths_when_the_driver_does_not_say() -> None:
    inv = read(pairs_node(numa_ids=False))
    assert all(g.numa_node is None for g in inv.gpus)
    assert [places(inv)[g.uuid].numa for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_lost_gpu_has_no_place_and_its_peer_no_link() -> None:
    node = pairs_node(4)
    node = replace(node, gpus=(replace(node.gpus[0], lost=True), *node.gpus[1:]))
    inv = read(node)
    got = places(inv)
    assert inv.gpus[0].uuid not in got
    assert got[inv.gpus[1].uuid].peers == ()


def test_a_read_without_links_has_no_places() -> None:
    reader = NvmlReader(FakeNvml(pairs_node()))
    with reader:
        inv = reader.read(links=False)
    assert isinstance(inv, Inventory) and places(inv) == {}


def test_one_gpu_sits_alone() -> None:
    inv = read(h200())
    assert places(inv) == {inv.gpus[0].uuid: Place(0, 0, False, ())}
