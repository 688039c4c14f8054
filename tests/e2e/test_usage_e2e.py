"""Idle GPUs made visible, end to end: the service reads the dev cluster's allocation stats, shows each
running entry's utilisation, counts idle GPUs in its metrics, and `queue` flags the idle entry."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests
from harness import start_service, submit, wait_for

from nomad_gpu.api.payloads import Entries, Usage
from nomad_gpu.cli.queueview import queue_row
from nomad_gpu.devcluster import DevCluster
from nomad_gpu.service.config.usageconfig import UsageSettings

pytestmark = pytest.mark.e2e


def _spec(name: str, util: int) -> str:
    return (f"name: {name}\nteam: e2e\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            f"gpu: {{count: 1}}\ndev: {{duration_s: 3600, gpu_util: {util}}}\n")


def test_an_idle_entry_is_shown_counted_and_flagged(seed: DevCluster, tmp_path: Path) -> None:
    runtime = start_service(seed.url, tmp_path / "q.db",
                            usage=UsageSettings(interval_s=0.2, timeout_s=2.0, idle_after_s=1.0))
    try:
        (lazy,) = submit(runtime, _spec("lazy", 2))
        (busy,) = submit(runtime, _spec("busy", 90))

        def usage(entry_id: str) -> dict[str, Any] | None:
            body = requests.get(f"{runtime.address}/v1/jobs/{entry_id}", timeout=5).json()
            return body["usage"]

        def idle_metric() -> float:
            text = requests.get(f"{runtime.address}/metrics", timeout=5).text
            line = next(ln for ln in text.splitlines() if ln.startswith('nomad_gpu_idle_gpus{kind="gpu"}'))
            return float(line.split()[-1])

        wait_for(lambda: (usage(busy["id"]) or {}).get("gpu_util_pct") == 90, 20, "the busy entry's utilisation")
        first = usage(lazy["id"])
        assert first is not None and first["gpu_util_pct"] == 2 and first["gpu_memory_total_mib"] == 81920
        wait_for(lambda: (usage(lazy["id"]) or {}).get("idle") is True, 20, "the lazy entry to turn idle")
        assert idle_metric() == 1.0 and usage(busy["id"])["idle"] is False  # type: ignore[index]
        body = requests.get(f"{runtime.address}/v1/jobs", timeout=5).json()
        listed = {e.id: e for e in Entries.from_json(body).entries}
        lazy_usage = listed[lazy["id"]].usage
        assert isinstance(lazy_usage, Usage) and lazy_usage.idle_gpus == 1
        assert "IDLE" in queue_row(listed[lazy["id"]], {}, time.time())[-2]
        assert "IDLE" not in queue_row(listed[busy["id"]], {}, time.time())[-2]
        requests.delete(f"{runtime.address}/v1/jobs/{lazy['id']}", headers={"X-Nomad-Gpu-Client": "test"},
                        timeout=5)
        wait_for(lambda: idle_metric() == 0.0, 20, "the idle count to drop once the lazy entry ends")
    finally:
        runtime.stop()
