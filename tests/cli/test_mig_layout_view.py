"""`nomad-gpu inventory --devices` draws each MIG GPU by placement, one row per physical GPU, with a
re-layout in flight named beside it; a stock-plugin node says its layout is not known."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from nomad_gpu.api.payloads import Inventory as InventoryPayload
from nomad_gpu.api.payloads import NodeView
from nomad_gpu.cli import connect
from nomad_gpu.cli import main as cli_main
from nomad_gpu.cli.miglayoutview import NOT_KNOWN, layout_rows
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Inventory, MigPlacementOf, MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.units import MigProfile
from nomad_gpu.service.http.views import inventory_nodes
from nomad_gpu.service.relayout.controller import Phase, Record

H100 = "NVIDIA H100 80GB HBM3"
GPU_A, GPU_B = "GPU-1a2b3c4d-0000-4000-8000-000000000001", "GPU-9f8e7d6c-0000-4000-8000-000000000002"


def _mig(node: str, iid: str, profile: str, gpu: str | None, start: int, size: int) -> MigSlice:
    return MigSlice(InstanceId(iid), H100, MigProfile.parse(profile), 0, pci_bus_id=f"0000:{node}:{(gpu or '')[-2:]}",
                    placement=MigPlacementOf(gpu, start, size) if gpu and node == "n1" else None)


def _nodes(relayouts: list[Record]) -> list[NodeView]:
    placed = (_mig("n1", "MIG-a0", "3g.40gb", GPU_A, 0, 4), _mig("n1", "MIG-a4", "1g.10gb", GPU_A, 4, 1),
              _mig("n1", "MIG-a6", "1g.10gb", GPU_A, 6, 1), _mig("n1", "MIG-a5", "1g.10gb", GPU_A, 5, 1),
              _mig("n1", "MIG-b0", "7g.80gb", GPU_B, 0, 8))
    stock = (_mig("n2", "MIG-s0", "3g.40gb", "x", 0, 4), _mig("n2", "MIG-s1", "3g.40gb", "x", 4, 4))
    ledger = Ledger(Inventory.of([Node(NodeId("n1"), name="h100-mig-1", cpu_mhz=8000, memory_mb=8000, migs=placed),
                                  Node(NodeId("n2"), name="h100-stock", cpu_mhz=8000, memory_mb=8000, migs=stock)]))
    ledger.reserve(EntryId("q000003"), Team("t"), [AllocPlacement("main", 0, NodeId("n1"), 0, 0,
                                                                  (InstanceId("MIG-a0"),), f"{H100} MIG 3g.40gb", 0,
                                                                  3 / 7)])
    # the CLI reads what the API sends: through JSON and back
    return list(InventoryPayload.from_json(InventoryPayload(tuple(inventory_nodes(ledger, relayouts))).to_json()).nodes)


RELAYOUT = Record("n1", "h100-mig-1", GPU_A, "relayout-1", "3g.40gb@0,3g.40gb@4", ("MIG-a4", "MIG-a5", "MIG-a6"),
                  ("q000009",), 100.0, Phase.APPLYING)


def test_each_physical_gpu_is_drawn_by_placement() -> None:
    placed, stock = _nodes([])
    a, b = layout_rows(placed)
    assert a[:3] == ("h100-mig-1", "GPU-1a2b3c4d", "H100")
    assert a[3] == "[3g.40gb*__________][1g_][1g_][1g_]....."  # slice 7 has no instance
    assert a[4] == "3g.40gb@0 q000003" and a[5] == ""
    assert b[1] == "GPU-9f8e7d6c" and b[3] == "[7g.80gb" + "_" * 31 + "]" and b[4] == ""
    (row,) = layout_rows(stock)
    assert row[0] == "h100-stock" and row[3] == NOT_KNOWN


def test_a_relayout_in_flight_is_named_beside_its_gpu() -> None:
    placed, _ = _nodes([RELAYOUT])
    a, b = layout_rows(placed)
    assert a[5] == "re-layout in progress: 3g.40gb@4 (applying)" and b[5] == ""
    assert a[3] == "[3g.40gb*__________][1g~][1g~][1g~]....."  # the idle 1g it replaces
    assert b[3] == "[7g.80gb" + "_" * 31 + "]"


def test_the_command(monkeypatch: Any) -> None:
    nodes = _nodes([RELAYOUT])

    class FakeClient:
        def inventory(self) -> list[NodeView]:
            return nodes

    monkeypatch.setattr(connect, "client", FakeClient)
    out = CliRunner().invoke(cli_main.main, ["inventory", "--devices"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    gpu_a = next(line for line in lines if "GPU-1a2b3c4d" in line)
    assert "[3g.40gb*__________][1g~][1g~][1g~]....." in gpu_a
    assert "re-layout in progress: 3g.40gb@4" in gpu_a and "q000003" in gpu_a
    assert any("GPU-9f8e7d6c" in line and "[7g.80gb" in line for line in lines)
    assert any(line.startswith("h100-stock") and NOT_KNOWN in line for line in lines)
