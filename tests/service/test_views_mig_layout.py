"""The inventory payload of a MIG GPU by placement: per physical GPU, its instances' first slice and size,
who holds them, and the re-layout in flight on it; a stock-plugin node's GPU has no UUID (layout unknown)."""

from __future__ import annotations

from nomad_gpu.api.payloads import Inventory as InventoryPayload
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Inventory, MigPlacementOf, MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.units import MigProfile
from nomad_gpu.service.http.views import inventory_nodes, inventory_view
from nomad_gpu.service.relayout.controller import Phase, Record

H100 = "NVIDIA H100 80GB HBM3"
GPU_A, GPU_B = "GPU-aaaa0000-0000-4000-8000-000000000001", "GPU-bbbb0000-0000-4000-8000-000000000002"


def _mig(iid: str, profile: str, gpu: str | None, start: int, size: int, bus: str | None) -> MigSlice:
    return MigSlice(InstanceId(iid), H100, MigProfile.parse(profile), 0, pci_bus_id=bus,
                    placement=MigPlacementOf(gpu, start, size) if gpu else None)


def _ledger(placed: bool = True) -> Ledger:
    a = GPU_A if placed else None
    b = GPU_B if placed else None
    migs = (_mig("MIG-a1", "1g.10gb", a, 6, 1, "00:07"), _mig("MIG-a0", "3g.40gb", a, 0, 4, "00:07"),
            _mig("MIG-a4", "1g.10gb", a, 4, 1, "00:07"), _mig("MIG-a5", "1g.10gb", a, 5, 1, "00:07"),
            _mig("MIG-b0", "7g.80gb", b, 0, 8, "00:08"))
    ledger = Ledger(Inventory.of([Node(NodeId("n1"), name="mig-1", cpu_mhz=8000, memory_mb=8000, migs=migs)]))
    ledger.reserve(EntryId("q1"), Team("t"), [AllocPlacement("main", 0, NodeId("n1"), 0, 0, (InstanceId("MIG-a0"),),
                                                             f"{H100} MIG 3g.40gb", 0, 3 / 7)])
    return ledger


def _record(phase: Phase = Phase.APPLYING) -> Record:
    return Record("n1", "mig-1", GPU_A, "relayout-1", "3g.40gb@0,3g.40gb@4", ("MIG-a4", "MIG-a5", "MIG-a1"),
                  ("q2",), 100.0, phase)


def test_each_physical_gpu_lists_its_instances_by_placement() -> None:
    (node,) = inventory_view(_ledger())
    gpus = {g["uuid"]: g for g in node["mig_gpus"]}
    assert set(gpus) == {GPU_A, GPU_B}
    assert gpus[GPU_A]["instances"] == ["MIG-a0", "MIG-a4", "MIG-a5", "MIG-a1"]  # by first slice
    assert gpus[GPU_A]["memory_slices"] == 8 and gpus[GPU_A]["relayout"] is None
    by_id = {m["id"]: m for m in node["migs"]}
    assert (by_id["MIG-a0"]["gpu"], by_id["MIG-a0"]["start"], by_id["MIG-a0"]["memory_slices"]) == (GPU_A, 0, 4)
    assert by_id["MIG-a0"]["holders"] and not by_id["MIG-a4"]["holders"] and by_id["MIG-a4"]["free"]


def test_a_relayout_in_flight_is_shown_on_its_gpu_with_what_it_creates() -> None:
    nodes = inventory_nodes(_ledger(), [_record(Phase.FINGERPRINT)])
    gpus = {g.uuid: g for g in nodes[0].mig_gpus}
    r = gpus[GPU_A].relayout
    assert r is not None and gpus[GPU_B].relayout is None
    assert r.layout == ("3g.40gb@0", "3g.40gb@4") and r.creates == ("3g.40gb@4",)
    assert r.destroys == ("MIG-a4", "MIG-a5", "MIG-a1") and r.phase == "fingerprint" and r.started_at == 100.0


def test_an_ended_relayout_is_not_shown() -> None:
    for phase in (Phase.DONE, Phase.FAILED):
        nodes = inventory_nodes(_ledger(), [_record(phase)])
        assert all(g.relayout is None for g in nodes[0].mig_gpus)


def test_a_stock_plugin_gpu_has_no_uuid_and_reads_back() -> None:
    nodes = inventory_nodes(_ledger(placed=False), [_record()])
    assert [g.uuid for g in nodes[0].mig_gpus] == [None, None]
    assert all(m.gpu is None and m.start is None for m in nodes[0].migs)
    payload = InventoryPayload(tuple(nodes))
    assert InventoryPayload.from_json(payload.to_json()) == payload
