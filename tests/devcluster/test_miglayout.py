"""MIG placements in the dev cluster: the cluster file's rule, refused layouts, what the plugin publishes."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.devcluster import ClusterFileError, parse_cluster
from nomad_gpu.devcluster.inventory import build_nodes
from nomad_gpu.devcluster.miglayout import arrange
from nomad_gpu.nomad.migdecode import decode_mig_placements

H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_mib": 81920}


def cluster(mig: list[str], plugin: str = "nomad-gpu", count: int = 1) -> dict[str, Any]:
    return {"name": "mig", "nodes": [{"name": "h100-mig-1", "device_plugin": plugin,
                                      "gpus": [{**H100, "count": count, "mig": mig}]}]}


def test_the_fixed_rule_places_largest_first_lowest_start_first() -> None:
    assert arrange(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], 81920) == [
        ("3g.40gb", 4, 4), ("2g.20gb", 0, 2), ("1g.10gb", 2, 1), ("1g.10gb", 3, 1)]
    assert arrange(["1g.10gb@6", "3g.40gb"], 81920) == [("1g.10gb", 6, 1), ("3g.40gb", 0, 4)]


@pytest.mark.parametrize(("mig", "fragment"), [
    pytest.param(["3g.40gb@0", "2g.20gb@2"], "no valid placement", id="overlap"),
    pytest.param(["3g.40gb@2"], "may start only at 0, 4", id="bad-start"),
    pytest.param(["4g.40gb", "2g.20gb", "1g.10gb@4"], "no valid placement", id="explicit-blocks-rule"),
    pytest.param(["1g.10gb"] * 7 + ["1g.10gb"], "compute slices", id="eight-1g"),
])
def test_a_layout_without_valid_placement_is_refused_in_one_line(mig: list[str], fragment: str) -> None:
    with pytest.raises(ClusterFileError, match=fragment) as info:
        parse_cluster(cluster(mig))
    first = str(info.value).splitlines()[0]
    assert first.startswith("<cluster>: nodes[0].gpus[0]") and fragment in first  # located, on one line


def test_project_plugin_nodes_publish_placements_the_service_decodes() -> None:
    (node,) = build_nodes(parse_cluster(cluster(["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"], count=2)))
    got = decode_mig_placements(node.to_json())
    assert len(got) == 8
    by_gpu: dict[str, list[str]] = {}
    for p in got.values():
        by_gpu.setdefault(p.gpu, []).append(f"{p.profile}@{p.start}")
    assert [sorted(v) for v in by_gpu.values()] == [["1g.10gb@4", "1g.10gb@5", "1g.10gb@6", "3g.40gb@0"]] * 2
    assert {g.uuid for g in node.mig_gpus} == set(by_gpu)


def test_stock_plugin_nodes_publish_none() -> None:
    (node,) = build_nodes(parse_cluster(cluster(["3g.40gb", "3g.40gb"], plugin="nvidia")))
    assert decode_mig_placements(node.to_json()) == {}
    assert [i.start for i in node.mig_gpus[0].instances] == [0, 4]
