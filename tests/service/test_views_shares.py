"""The inventory view of a GPU shared through the device plugin: holders named once, on the GPU."""

from __future__ import annotations

from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.service.http.views import inventory_view


def test_a_share_of_two_slots_is_one_holder_of_its_gpu() -> None:
    slots = tuple(InstanceId(f"GPU-a-share-{k}") for k in range(4))
    gpu = Gpu(InstanceId("GPU-a"), "L40S", 46068, mode=GpuMode.SHARED, max_tenants=4, share_ids=slots,
              share_device="L40S")
    ledger = Ledger(Inventory.of([Node(NodeId("n1"), name="n1", cpu_mhz=8000, memory_mb=8000, gpus=(gpu,))]))
    ledger.reserve(EntryId("q1"), Team("t"), [AllocPlacement("main", 0, NodeId("n1"), 0, 0, slots[:2], "L40S", 500,
                                                             0.5, share_gpu=InstanceId("GPU-a"))])
    (node,) = inventory_view(ledger)
    (shared,) = node["gpus"]
    assert shared["holders"] == [{"entry": "q1", "team": "t", "milli": 500}] and shared["free_milli"] == 500
