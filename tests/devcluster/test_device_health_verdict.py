"""The audit verdict on unhealthy devices (devicehealth.placed_while_unhealthy): an allocation made on a
device inside one of its unhealthy spells is named; one made before or after, or on another device, is not."""

from __future__ import annotations

from nomad_gpu.devcluster.devicehealth import placed_while_unhealthy


def test_only_allocations_made_inside_a_spell_are_named() -> None:
    audit = {
        "device_health": [{"device_id": "GPU-a", "unhealthy_at": 10.0, "healthy_at": 20.0},
                          {"device_id": "GPU-b", "unhealthy_at": 30.0, "healthy_at": None}],
        "allocations": [{"alloc_id": "before", "device_ids": ["GPU-a"], "created_at": 9.0},
                        {"alloc_id": "inside", "device_ids": ["GPU-a"], "created_at": 15.0},
                        {"alloc_id": "after", "device_ids": ["GPU-a"], "created_at": 20.0},
                        {"alloc_id": "other", "device_ids": ["GPU-c"], "created_at": 15.0},
                        {"alloc_id": "still", "device_ids": ["GPU-b"], "created_at": 99.0}],
    }
    assert placed_while_unhealthy(audit) == ["inside", "still"]
    assert placed_while_unhealthy({"allocations": []}) == []
