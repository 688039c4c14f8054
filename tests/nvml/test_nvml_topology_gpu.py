"""The real topology on a GPU machine, read only: what the device plugin would publish, and that it reads back."""

from __future__ import annotations

import pytest

from nomad_gpu.domain import topowire
from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.nvml import Inventory, read_inventory
from nomad_gpu.nvml.links import places
from nomad_gpu.plugin.topology import topology_attribute

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    got = read_inventory()
    if not isinstance(got, Inventory):
        pytest.skip(got.message)
    return got


def test_every_readable_gpu_has_a_place(inventory: Inventory) -> None:
    where = places(inventory)
    whole = [g for g in inventory.gpus if not g.lost]
    assert {g.uuid for g in whole} <= set(where)
    for uuid, p in where.items():
        assert p.numa is None or p.numa >= 0
        assert all(peer in where and links > 0 for peer, links in p.peers)
        assert all(any(back == uuid for back, _ in where[peer].peers) for peer, _ in p.peers)  # links are mutual


def test_the_published_attribute_reads_back(inventory: Inventory) -> None:
    gpus = [g for g in inventory.gpus if not g.lost and g.pci_bus_id]
    value = topology_attribute(inventory, (g.uuid for g in gpus))
    assert value is not None and len(value) < topowire.MAX_LENGTH
    print(f"\ntopology attribute ({len(gpus)} GPUs): {value}")
    topology = topowire.to_topology(topowire.decode(value), {InstanceId(g.uuid): g.pci_bus_id or "" for g in gpus})
    assert {str(i) for i, _ in topology.places} == {g.uuid for g in gpus}
    if len(gpus) >= 2:
        assert topology.link_class([InstanceId(g.uuid) for g in gpus]) is not None
