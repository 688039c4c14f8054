"""The device plugin's `topology` attribute read from node JSON; the stock plugin's nodes have none."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.topology import LinkClass
from nomad_gpu.nomad.decode import decode_node

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nomad"


def a800() -> dict[str, Any]:
    node: dict[str, Any] = json.loads((FIXTURES / "node_a800_8x.json").read_text())
    return node


def with_topology(node: dict[str, Any], value: str) -> dict[str, Any]:
    node = copy.deepcopy(node)
    node["NodeResources"]["Devices"][0]["Attributes"]["topology"] = {
        "Float": None, "Int": None, "String": value, "Bool": None, "Unit": ""}
    return node


def ids(node: dict[str, Any]) -> list[InstanceId]:
    return [InstanceId(i["ID"]) for i in node["NodeResources"]["Devices"][0]["Instances"]]


PAIRS = ("1;0:07:00.0/0/0/1*4 0:17:00.0/0/0/0*4 0:27:00.0/0/1/3*4 0:37:00.0/0/1/2*4 "
         "0:47:00.0/1/2/5*4 0:57:00.0/1/2/4*4 0:67:00.0/1/3/7*4 0:77:00.0/1/3/6*4")


def test_the_stock_plugin_publishes_no_topology_so_gpus_are_pcie_peers() -> None:
    node = decode_node(a800())
    assert node.topology is None


def test_pairs_and_sockets_are_joined_to_instances_by_pci_bus_id() -> None:
    raw = with_topology(a800(), PAIRS)
    gpu = ids(raw)
    topology = decode_node(raw).topology
    assert topology is not None
    assert topology.link_class(gpu[0:4]) is LinkClass.NVLINK
    assert topology.link_class(gpu[1:3]) is LinkClass.NUMA
    assert topology.link_class(gpu[2:4] + gpu[4:6]) is LinkClass.NVLINK
    assert topology.link_class(gpu[3:5]) is LinkClass.SYSTEM
    assert topology.nvlink_groups() == sorted(tuple(sorted(gpu[k:k + 2])) for k in range(0, 8, 2))


def test_an_nvswitch_node_is_one_fabric() -> None:
    value = "1;" + " ".join(f"0:{0x07 + 0x10 * k:02x}:00.0/{k // 4}/{k // 2}/S" for k in range(8))
    raw = with_topology(a800(), value)
    topology = decode_node(raw).topology
    assert topology is not None and topology.nvlink_groups() == [tuple(sorted(ids(raw)))]


def test_a_bad_attribute_costs_the_topology_not_the_gpus(caplog: pytest.LogCaptureFixture) -> None:
    raw = with_topology(a800(), "1;0:07:00.0/0/0/9*4")
    with caplog.at_level(logging.WARNING):
        node = decode_node(raw)
    assert len(node.gpus) == 8 and node.topology is not None and node.topology.places == ()
    assert "topology of device group" in caplog.text


def test_an_instance_without_locality_has_an_unknown_place() -> None:
    raw = with_topology(a800(), PAIRS)
    raw["NodeResources"]["Devices"][0]["Instances"][0]["Locality"] = None
    gpu = ids(raw)
    topology = decode_node(raw).topology
    assert topology is not None and topology.place(gpu[0]) is None
    assert topology.link_class(gpu[0:2]) is LinkClass.SYSTEM  # GPU 1 is bridged to an unknown GPU
