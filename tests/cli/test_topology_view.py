"""`nomad-gpu inventory --devices` shows each node's NVLink groups and NUMA nodes, built from the core's view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from nomad_gpu.api.payloads import NodeView
from nomad_gpu.cli import connect
from nomad_gpu.cli import main as cli_main
from nomad_gpu.cli.inventoryview import device_rows, topology_rows
from nomad_gpu.devcluster import load_cluster_file
from nomad_gpu.devcluster.inventory import build_nodes
from nomad_gpu.nomad.decode import decode_node
from nomad_gpu.service.http.views import node_view

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"



def views() -> dict[str, NodeView]:
    """The nvlink-fleet and seed nodes as the service shows them (fingerprint -> decoder -> view -> JSON)."""
    out = {}
    for name in ("nvlink-fleet", "seed-a800"):
        for raw in build_nodes(load_cluster_file(CLUSTERS / f"{name}.yaml")):
            view = node_view(decode_node(raw.to_json()), None)
            out[view.name] = NodeView.from_json(view.to_json())
    return out


def test_pairs_on_two_sockets_and_the_nvswitch_board() -> None:
    nodes = views()
    assert topology_rows(nodes["a100-pairs-1"]) == [
        ("a100-pairs-1", "a 2 GPUs, b 2 GPUs, c 2 GPUs, d 2 GPUs", "0: 4 GPUs, 1: 4 GPUs")]
    assert topology_rows(nodes["a800-nvswitch-1"]) == [("a800-nvswitch-1", "a 8 GPUs", "0: 4 GPUs, 1: 4 GPUs")]
    assert topology_rows(nodes["gpu-a800-1"]) == [("gpu-a800-1", "topology unknown (not published)", "-")]


def test_each_gpu_row_names_its_nvlink_group_and_numa_node() -> None:
    nodes = views()
    kinds = [row[2] for row in device_rows(nodes["a100-pairs-1"])]
    by_gpu = {g.id: g for g in nodes["a100-pairs-1"].gpus}
    groups = nodes["a100-pairs-1"].nvlink_groups
    assert sorted(kinds) == sorted(f"gpu nvlink {'abcd'[k]} numa {by_gpu[i].numa_node}"
                                   for k, members in enumerate(groups) for i in members)
    assert {row[2] for row in device_rows(nodes["gpu-a800-1"])} == {"gpu"}


def test_the_command_adds_the_topology_table_only_where_a_node_publishes_one(monkeypatch: Any) -> None:
    nodes = views()

    class FakeClient:
        shown: list[NodeView] = []

        def inventory(self) -> list[NodeView]:
            return self.shown

    monkeypatch.setattr(connect, "client", FakeClient)
    FakeClient.shown = [nodes["gpu-a800-1"]]
    assert "NVLINK GROUPS" not in CliRunner().invoke(cli_main.main, ["inventory", "--devices"]).stdout
    FakeClient.shown = list(nodes.values())
    out = CliRunner().invoke(cli_main.main, ["inventory", "--devices"])
    assert out.exit_code == 0 and "NVLINK GROUPS" in out.stdout and "a 8 GPUs" in out.stdout
    assert "topology unknown (not published)" in out.stdout and "PCIe" not in out.stdout


def test_status_and_queue_say_the_link_class_of_a_multi_gpu_placement() -> None:
    from nomad_gpu.api.payloads import Entry
    from nomad_gpu.cli.entryview import status_lines
    from nomad_gpu.cli.queueview import where
    from nomad_gpu.domain.ids import InstanceId, NodeId
    from nomad_gpu.domain.placement import AllocPlacement
    from nomad_gpu.domain.topology import LinkClass
    from nomad_gpu.service.asks.translate import placement_json

    four = AllocPlacement("train", 0, NodeId("n-1"), 1000, 1024, tuple(InstanceId(f"GPU-{k}") for k in range(4)),
                          "NVIDIA A100-SXM4-80GB", gpu_equivalents=4.0, link=LinkClass.NVLINK)
    one = AllocPlacement("eval", 0, NodeId("n-1"), 1000, 1024, (InstanceId("GPU-7"),), "NVIDIA A100-SXM4-80GB",
                         gpu_equivalents=1.0)
    entry = Entry.from_json({"id": "q000001", "name": "train", "team": "a", "state": "running",
                             "placements": [placement_json(four), placement_json(one)]})
    assert entry.placements[0].link == "NVLink" and entry.placements[1].link is None
    lines = status_lines(entry, None, None, {"n-1": "a100-1"})
    assert ("gpus", "4 x A100 on a100-1, NVLink") in lines
    assert sum(1 for label, _ in lines if label == "gpus") == 1
    assert where(entry, {"n-1": "a100-1"}) == "a100-1: 5 devices, NVLink"


def test_nvlink_groups_are_lettered_in_device_order() -> None:
    node = views()["a100-pairs-1"]
    assert [g.nvlink_group for g in node.gpus] == [0, 0, 1, 1, 2, 2, 3, 3]
