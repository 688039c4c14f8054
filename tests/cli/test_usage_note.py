"""`nomad-gpu queue` flags idle entries and shows the utilisation of running ones; `render` previews a
share as the device plugin's share instances."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from nomad_gpu.api.payloads import Entry
from nomad_gpu.cli.main import main
from nomad_gpu.cli.queueview import queue_row, usage_note


def _entry(usage: dict[str, Any] | None) -> Entry:
    return Entry.from_json({
        "id": "q1", "name": "n", "team": "t", "priority": 50, "state": "running", "spec": {"groups": []},
        "placements": [{"group": "main", "index": 0, "node": "n1", "instance_ids": ["GPU-a"],
                        "device_name": "NVIDIA A100", "share_milli": 0}], "usage": usage})


@pytest.mark.parametrize(("usage", "note"), [
    (None, ""),
    ({"gpu_util_pct": 87.4, "gpu_memory_used_mib": 40960, "gpu_memory_total_mib": 81920, "idle": False,
      "idle_since": None}, "87% util, 40.0/80 GiB"),
    ({"gpu_util_pct": 2, "gpu_memory_used_mib": None, "gpu_memory_total_mib": None, "idle": True,
      "idle_since": 1000.0}, "IDLE 35m, 2% util"),
    ({"gpu_util_pct": None, "gpu_memory_used_mib": 100, "gpu_memory_total_mib": None, "idle": True,
      "idle_since": None}, "IDLE, 0.1 GiB"),
])
def test_usage_note(usage: dict[str, Any] | None, note: str) -> None:
    assert usage_note(Entry.from_json({"usage": usage}), now=1000.0 + 35 * 60) == note


def test_the_queue_row_carries_the_note_after_where_it_runs() -> None:
    usage = {"gpu_util_pct": 1, "idle": True, "idle_since": 0.0}
    assert queue_row(_entry(usage), {"n1": "gpu-1"}, now=3600.0)[-2] == "gpu-1: 1 device (IDLE 1h00m, 1% util)"
    assert queue_row(_entry(None), {"n1": "gpu-1"}, now=3600.0)[-2] == "gpu-1: 1 device"


@pytest.mark.parametrize(("slots", "expected"), [
    ("4", 'value     = "GPU-<shared>-share-0,GPU-<shared>-share-1"'),
    ("8", 'value     = "GPU-<shared>-share-0,GPU-<shared>-share-1,GPU-<shared>-share-2,GPU-<shared>-share-3"'),
    ("0", 'NVIDIA_VISIBLE_DEVICES = "GPU-<shared>"'),
])
def test_render_previews_a_share(tmp_path: Any, slots: str, expected: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: nb\ntask: {image: i}\nshare: {milli: 500}\n")
    result = CliRunner().invoke(main, ["render", str(spec), "--share-slots", slots])
    assert result.exit_code == 0, result.output
    assert expected in result.output
    assert ('device "nomad-gpu/shared-gpu/<model>"' in result.output) == (slots != "0")
