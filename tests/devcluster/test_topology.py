"""Cluster-file topology (`nvlink:` per GPU entry, `numa_nodes:` per node), advertised only by the project's plugin."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.devcluster import ClusterFileError, load_cluster_file, parse_cluster
from nomad_gpu.devcluster.inventory import build_nodes
from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.topology import LinkClass
from nomad_gpu.nomad.decode import decode_node

from .conftest import CLUSTERS

A100 = "NVIDIA A100 80GB PCIe"


def cluster(*, plugin: str = "nomad-gpu", nvlink: str = "pairs", count: int = 8, numa: int = 2,
            **gpu: Any) -> dict[str, Any]:
    return {"name": "t", "nodes": [{"name": "n1", "device_plugin": plugin, "numa_nodes": numa, "gpus": [
        {"model": A100, "count": count, "memory_mib": 81920, "nvlink": nvlink, **gpu}]}]}


def decoded(spec: dict[str, Any]) -> tuple[Any, list[InstanceId]]:
    (node,) = build_nodes(parse_cluster(spec))
    raw = node.to_json()
    gpus = [InstanceId(i) for g in node.groups if g.type == "gpu" for i in g.ids]
    return decode_node(raw), gpus


def test_pairs_on_two_numa_nodes_reach_the_service_through_the_fingerprint() -> None:
    node, gpu = decoded(cluster())
    t = node.topology
    assert t is not None
    assert t.nvlink_groups() == sorted(tuple(sorted(gpu[k:k + 2])) for k in range(0, 8, 2))
    assert t.link_class(gpu[0:4]) is LinkClass.NVLINK
    assert t.link_class(gpu[1:3]) is LinkClass.NUMA
    assert t.link_class(gpu[3:5]) is LinkClass.SYSTEM
    assert [n for n, _ in t.numa_nodes()] == [0, 1]


def test_nvswitch_is_one_fabric() -> None:
    node, gpu = decoded(cluster(nvlink="all", numa=1))
    assert node.topology is not None and node.topology.nvlink_groups() == [tuple(sorted(gpu))]
    assert node.topology.link_class(gpu[2:5]) is LinkClass.NVLINK


def test_no_nvlink_still_says_where_the_sockets_are() -> None:
    node, gpu = decoded(cluster(nvlink="none"))
    assert node.topology is not None and node.topology.nvlink_groups() == []
    assert node.topology.link_class(gpu[0:4]) is LinkClass.NUMA


def test_the_stock_plugin_advertises_no_topology() -> None:
    (raw_node,) = build_nodes(parse_cluster(cluster(plugin="nvidia")))
    assert all("topology" not in g.to_json()["Attributes"] for g in raw_node.groups)
    node, _ = decoded(cluster(plugin="nvidia"))
    assert node.topology is None


def test_bundled_fleets() -> None:
    nodes = {n.name: n for n in build_nodes(load_cluster_file(CLUSTERS / "nvlink-fleet.yaml"))}
    pairs = decode_node(nodes["a100-pairs-1"].to_json()).topology
    board = decode_node(nodes["a800-nvswitch-1"].to_json()).topology
    assert pairs is not None and len(pairs.nvlink_groups()) == 4 and len(pairs.numa_nodes()) == 2
    assert board is not None and len(board.nvlink_groups()) == 1 and len(board.nvlink_groups()[0]) == 8
    (seed,) = build_nodes(load_cluster_file(CLUSTERS / "seed-a800.yaml"))
    assert decode_node(seed.to_json()).topology is None  # NVSwitch board, stock plugin: nothing published


@pytest.mark.parametrize(("spec", "message"), [
    pytest.param(cluster(count=3), "needs an even count", id="odd-pairs"),
    pytest.param(cluster(nvlink="all", mig=["3g.40gb"]), "MIG instances have no peer-to-peer", id="nvlink-on-mig"),
    pytest.param(cluster(count=2, numa=4), "4 NUMA nodes for 2 GPUs", id="more-sockets-than-gpus"),
    pytest.param(cluster(nvlink="sometimes"), "nvlink", id="unknown-nvlink"),
    pytest.param({"name": "t", "nodes": [{"name": "n1", "gpus": [
        {"model": A100, "count": 4, "memory_mib": 81920, "nvlink": "all"},
        {"model": A100, "count": 4, "memory_mib": 81920}]}]}, "one device group", id="two-entries-one-fabric"),
])
def test_bad_topology_is_refused_with_a_located_error(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ClusterFileError, match=message):
        parse_cluster(spec)
