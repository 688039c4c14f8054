"""An unhealthy device in `inventory --devices` (since when, where known) and in `status ID` (a note per
device of the entry that Nomad leaves running on it): pure formatting of the API's payloads."""

from __future__ import annotations

from typing import Any

from nomad_gpu.api.payloads import Entry, NodeView
from nomad_gpu.cli.entryview import status_lines
from nomad_gpu.cli.inventoryview import device_rows, unhealthy_text

GPU: dict[str, Any] = {"model": "NVIDIA A100-SXM4-80GB", "mode": "whole", "free_milli": 0, "holders": []}
NODE = NodeView.from_json({
    "id": "n-1", "name": "a100-1", "status": "ready", "schedulable": True,
    "gpus": [{**GPU, "id": "GPU-a", "healthy": False, "health": "XID 79", "unhealthy_since": 3600.0 * 7 + 60},
             {**GPU, "id": "GPU-b", "healthy": False}],  # an older service: neither field
    "migs": [{"id": "MIG-1", "device": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "profile": "3g.40gb", "healthy": False,
              "health": "lost", "unhealthy_since": 60.0, "free": True, "holders": []}],
})


def test_inventory_says_since_when_a_device_is_unhealthy() -> None:
    rows = {r[1]: r for r in device_rows(NODE)}
    assert rows["GPU-a"][4] == "unhealthy since 07:01Z"
    assert rows["GPU-b"][4] == "unhealthy"
    assert rows["MIG-1"][4] == "unhealthy since 00:01Z"
    assert unhealthy_text(None) == "unhealthy"
    assert NODE.gpus[0].health == "XID 79" and NODE.gpus[1].unhealthy_since is None


def test_status_flags_each_unhealthy_device_of_the_entry() -> None:
    entry = Entry(id="q1", name="train", state="running",
                  device_health=("GPU-a unhealthy since 2026-12-06T07:01:00Z: XID 79",))
    lines = [(label, value) for label, value in status_lines(entry, None, None, {}) if label == "unhealthy"]
    assert lines == [("unhealthy", "GPU-a unhealthy since 2026-12-06T07:01:00Z: XID 79")]
    assert Entry.from_json({"id": "q1", "state": "running"}).device_health == ()
