"""The service's record of unhealthy devices (service/loops/devicehealth.py): since when, and the notes an entry
on one carries. Nomad's fingerprint says only whether and why, never since when."""

from __future__ import annotations

from dataclasses import replace

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, GpuMode, Node
from nomad_gpu.service.loops.devicehealth import DeviceHealth, Spell, note

A100 = "NVIDIA A100-SXM4-80GB"


def _node(sick: dict[str, str], node: str = "n1") -> Node:
    gpus: tuple[Gpu, ...] = (Gpu(InstanceId("GPU-a"), A100), Gpu(InstanceId("GPU-b"), A100),
            Gpu(InstanceId("GPU-s"), A100, mode=GpuMode.SHARED, max_tenants=2,
                share_ids=(InstanceId("GPU-s-share-0"), InstanceId("GPU-s-share-1")), share_device=A100))
    gpus = tuple(replace(g, healthy=False, health=sick[g.id]) if g.id in sick else g for g in gpus)
    return Node(NodeId(node), name=node, cpu_mhz=1000, memory_mb=1000, gpus=gpus)


def test_since_is_kept_while_unhealthy_and_dropped_when_healthy() -> None:
    health = DeviceHealth()
    health.observe(_node({"GPU-a": "XID 79"}), now=100.0)
    health.observe(_node({"GPU-a": "XID 79", "GPU-b": "lost"}), now=160.0)
    assert health.spells() == {"GPU-a": Spell(100.0, "XID 79"), "GPU-b": Spell(160.0, "lost")}
    health.observe(_node({"GPU-b": "lost"}), now=200.0)
    assert health.spells() == {"GPU-b": Spell(160.0, "lost")}
    health.forget("n1")  # removed from Nomad
    assert health.spells() == {}
    health.observe(_node({"GPU-a": "XID 79"}), now=400.0)
    health.resync([], now=500.0)  # not in Nomad's whole picture any more
    assert health.spells() == {}


def test_a_shared_gpus_slots_are_unhealthy_with_it_and_notes_name_each_device() -> None:
    health = DeviceHealth()
    health.observe(_node({"GPU-s": "XID 48", "GPU-a": "XID 79"}), now=0.0)
    notes = health.notes([{"instance_ids": ["GPU-s-share-1"]}, {"instance_ids": ["GPU-b", "GPU-a"]}])
    assert notes == ("GPU-s-share-1 unhealthy since 1970-01-01T00:00:00Z: XID 48",
                     "GPU-a unhealthy since 1970-01-01T00:00:00Z: XID 79")
    assert note("GPU-x", Spell(86400.0, "")) == "GPU-x unhealthy since 1970-01-02T00:00:00Z"
