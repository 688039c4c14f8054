"""Cluster files: the shipped ones load, IDs are deterministic, bad files fail with located errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.devcluster import ClusterFileError, load_cluster_file, parse_cluster
from nomad_gpu.devcluster.inventory import SHARED_TYPE, build_nodes

from .conftest import CLUSTERS


@pytest.mark.parametrize("name", ["seed-a800", "mig-h100", "mixed-fleet", "nvlink-fleet"])
def test_shipped_cluster_files_load(name: str) -> None:
    cluster = load_cluster_file(CLUSTERS / f"{name}.yaml")
    assert cluster.name == name
    assert build_nodes(cluster)


def test_seed_has_eight_a800s() -> None:
    (node,) = build_nodes(load_cluster_file(CLUSTERS / "seed-a800.yaml"))
    (group,) = node.groups
    assert node.name == "gpu-a800-1"
    assert (group.vendor, group.type, group.name, group.memory_mib) == ("nvidia", "gpu", "NVIDIA A800-SXM4-80GB",
                                                                         81920)
    assert len(group.ids) == 8 and all(i.startswith("GPU-") for i in group.ids)


def test_mixed_fleet_has_two_datacenters_mig_and_shared() -> None:
    nodes = build_nodes(load_cluster_file(CLUSTERS / "mixed-fleet.yaml"))
    assert {node.datacenter for node in nodes} == {"dc1", "dc2"}
    assert any(" MIG " in group.name for node in nodes for group in node.groups)
    shared = [group for node in nodes for group in node.groups if group.type == SHARED_TYPE]
    assert len(shared) == 1 and len(shared[0].ids) == 2 * 4 and shared[0].slots == 4
    assert len({i.rpartition("-share-")[0] for i in shared[0].ids}) == 2


def _node(gpus: list[dict[str, object]], **node: object) -> dict[str, object]:
    return {"name": "c", "nodes": [{"name": "n", "gpus": gpus, **node}]}


def test_the_plugin_node_advertises_share_instances_and_the_stock_node_the_gpu_whole() -> None:
    shared = {"model": "L40S", "count": 1, "memory_mib": 46068, "shared": True}
    (plugin,) = build_nodes(parse_cluster(_node([{**shared, "slots": 4}], device_plugin="nomad-gpu")))
    (group,) = plugin.groups
    assert (group.vendor, group.type, group.name, group.slots) == ("nomad-gpu", "shared-gpu", "L40S", 4)
    assert [i.rpartition("-share-")[2] for i in group.ids] == ["0", "1", "2", "3"]
    assert group.attributes()["milli_per_slot"]["Int"] == 250 and plugin.shared_gpus == ()
    assert group.share_hold(group.ids[:2]) == (group.ids[0].rpartition("-share-")[0], 500)
    (stock,) = build_nodes(parse_cluster(_node([shared])))
    (group,) = stock.groups
    assert (group.vendor, group.type, group.name, group.slots) == ("nvidia", "gpu", "L40S", None)
    assert stock.shared_gpus == group.ids and group.share_hold(group.ids) is None


def test_the_plugin_advertises_whole_gpus_with_its_own_attributes() -> None:
    whole = [{"model": "A100", "memory_mib": 81920}]
    (plugin,) = build_nodes(parse_cluster(_node(whole, device_plugin="nomad-gpu")))
    (stock,) = build_nodes(parse_cluster(_node(whole)))
    assert set(plugin.groups[0].attributes()) == {"memory", "driver_version", "topology"}
    assert {"bar1", "power", "memory", "driver_version"} <= set(stock.groups[0].attributes())
    assert plugin.groups[0].ids == stock.groups[0].ids


def test_one_model_with_two_slot_counts_gets_a_group_per_count() -> None:
    gpus: list[dict[str, object]] = [{"model": "L40S", "memory_mib": 46068, "shared": True, "slots": n} for n in (2, 4)]
    (node,) = build_nodes(parse_cluster(_node(gpus, device_plugin="nomad-gpu")))
    assert sorted((g.name, len(g.ids)) for g in node.groups) == [("L40S (2 slots)", 2), ("L40S (4 slots)", 4)]


@pytest.mark.parametrize(("gpu", "node", "message"), [
    ({"shared": True, "slots": 4}, {}, "`slots` needs `device_plugin: nomad-gpu`"),
    ({"shared": True}, {"device_plugin": "nomad-gpu"}, "needs `slots`"),
    ({"slots": 4}, {"device_plugin": "nomad-gpu"}, "`slots` is for a shared GPU"),
    ({"shared": True, "slots": 49}, {"device_plugin": "nomad-gpu"}, "less than or equal to 48"),
    ({}, {"device_plugin": "nvidia-mps"}, "device_plugin"),
])
def test_bad_sharing_settings_are_refused(gpu: dict[str, object], node: dict[str, object], message: str) -> None:
    with pytest.raises(ClusterFileError, match=message):
        parse_cluster(_node([{"model": "L40S", "memory_mib": 46068, **gpu}], **node))


def test_ids_are_deterministic_and_distinct() -> None:
    first = build_nodes(load_cluster_file(CLUSTERS / "mixed-fleet.yaml"))
    second = build_nodes(load_cluster_file(CLUSTERS / "mixed-fleet.yaml"))
    assert [n.id for n in first] == [n.id for n in second]
    ids = [i for node in first for group in node.groups for i in group.ids]
    assert ids == [i for node in second for group in node.groups for i in group.ids]
    assert len(set(ids)) == len(ids)


def test_explicit_node_id_is_kept() -> None:
    node_id = "0b3f1c3e-1111-4222-8333-944455556666"
    cluster = parse_cluster({"name": "c", "nodes": [{"name": "n", "id": node_id}]})
    assert build_nodes(cluster)[0].id == node_id


def _cluster(gpu: dict[str, Any], **node: Any) -> dict[str, Any]:
    return {"name": "c", "nodes": [{"name": "n", "gpus": [gpu], **node}]}


@pytest.mark.parametrize(("data", "message"), [
    pytest.param(_cluster({"model": "X", "memory_mib": 1, "mig": ["9g.10gb"]}), "nodes[0].gpus[0].mig",
                 id="bad-profile"),
    pytest.param(_cluster({"model": "X", "memory_mib": 81920, "mig": ["4g.40gb", "4g.40gb"]}), "compute slices",
                 id="too-much-compute"),
    pytest.param(_cluster({"model": "X", "memory_mib": 81920, "mig": ["1g.20gb"] * 5}), "memory slices",
                 id="too-much-memory"),
    pytest.param(_cluster({"model": "X", "memory_mib": 81920, "mig": ["1g.10gb"], "shared": True}),
                 "both MIG-partitioned and shared", id="mig-and-shared"),
    pytest.param(_cluster({"model": "X", "memory_mib": 0}), "nodes[0].gpus[0].memory_mib", id="zero-memory"),
    pytest.param(_cluster({"model": "X", "memory_mib": 1, "colour": "red"}), "colour", id="unknown-key"),
    pytest.param({"name": "c", "nodes": [{"name": "n"}, {"name": "n"}]}, "repeated: n", id="duplicate-node"),
    pytest.param({"name": "c", "nodes": []}, "nodes", id="no-nodes"),
    pytest.param(_cluster({"model": "X", "memory_mib": 1}, reserved_cpu_shares=10**9), "reserved_cpu_shares",
                 id="reserved-too-big"),
])
def test_invalid_clusters_are_rejected_with_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ClusterFileError) as info:
        parse_cluster(data, source="test.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("test.yaml: ")


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ClusterFileError, match="missing.yaml: cannot read"):
        load_cluster_file(missing)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ClusterFileError, match="not valid YAML"):
        load_cluster_file(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ClusterFileError, match="must be a mapping"):
        load_cluster_file(listed)
