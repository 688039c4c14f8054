"""The project plugin's `mig.<MIG-uuid>` attributes reach the core's inventory as each instance's placement,
so the inventory can draw a MIG GPU by its slices; a node without them (the stock plugin) has none."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from nomad_gpu.domain.inventory import MigPlacementOf
from nomad_gpu.nomad.decode import decode_node

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nomad"
GPU = "GPU-4f1c2a9e-0000-4000-8000-000000000001"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def _with_placements(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, MigPlacementOf]]:
    raw = copy.deepcopy(raw)
    want: dict[str, MigPlacementOf] = {}
    start = 0
    for group in raw["NodeResources"]["Devices"]:
        if " MIG " not in group["Name"]:
            continue
        attrs = group.setdefault("Attributes", {})
        for inst in group["Instances"]:
            size = 4 if group["Name"].endswith("3g.40gb") else 1
            attrs[f"mig.{inst['ID']}"] = {"String": f"{GPU}@{start % 8}/{size}"}
            want[inst["ID"]] = MigPlacementOf(GPU, start % 8, size)
            start += size
    return raw, want


def test_placements_reach_the_inventory() -> None:
    raw, want = _with_placements(load("node_h100_mig_mixed.json"))
    node = decode_node(raw)
    assert want and {str(m.id): m.placement for m in node.migs} == want


def test_a_stock_plugin_node_has_no_placements() -> None:
    node = decode_node(load("node_h100_mig_mixed.json"))
    assert node.migs and all(m.placement is None for m in node.migs)


def test_an_unreadable_placement_is_left_out_not_refused() -> None:
    raw, _ = _with_placements(load("node_h100_mig_mixed.json"))
    group = next(g for g in raw["NodeResources"]["Devices"] if " MIG " in g["Name"])
    first = group["Instances"][0]["ID"]
    group["Attributes"][f"mig.{first}"] = {"String": "GPU-x@9/99"}
    node = decode_node(raw)
    by_id = {str(m.id): m for m in node.migs}
    assert by_id[first].placement is None
    assert sum(m.placement is not None for m in node.migs) == len(node.migs) - 1
