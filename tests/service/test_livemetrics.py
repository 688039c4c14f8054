"""Metrics read at scrape time (capacity by kind and model, entries by state, stream reconnects) and
the wait-time histogram fed where admissions are stored."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.http.livemetrics import (
    capacity,
    capacity_reader,
    entries_reader,
    entry_counts,
    reconnects_reader,
)
from nomad_gpu.store import EntryState, QueueEntry

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def gpu(mode: str = "whole", free: int = 1000, model: str = A100, healthy: bool = True) -> dict[str, Any]:
    return {"id": "GPU-x", "model": model, "mode": mode, "healthy": healthy, "free_milli": free, "holders": []}


def mig(profile: str, free: bool, healthy: bool = True) -> dict[str, Any]:
    return {"id": "MIG-x", "device": f"{H100} MIG {profile}", "healthy": healthy, "profile": profile, "free": free}


@pytest.mark.parametrize(("nodes", "expected"), [
    pytest.param([{"gpus": [gpu(), gpu(free=0), gpu(free=0, healthy=False)], "migs": []}],
                 {("whole", A100, "", "free"): 1.0, ("whole", A100, "", "used"): 1.0,
                  ("whole", A100, "", "unhealthy"): 1.0}, id="whole"),
    pytest.param([{"gpus": [gpu("flex", free=1000)], "migs": []}, {"gpus": [gpu(free=1000)], "migs": []}],
                 {("whole", A100, "", "free"): 2.0}, id="flex-counts-whole-summed-over-nodes"),
    pytest.param([{"gpus": [gpu("shared", free=250), gpu("shared", free=1000)], "migs": []}],
                 {("share", A100, "", "free"): 1.25, ("share", A100, "", "used"): 0.75}, id="shares-in-gpu-eq"),
    pytest.param([{"gpus": [], "migs": [mig("3g.40gb", True), mig("3g.40gb", False), mig("1g.10gb", True)]}],
                 {("mig", H100, "3g.40gb", "free"): 1.0, ("mig", H100, "3g.40gb", "used"): 1.0,
                  ("mig", H100, "1g.10gb", "free"): 1.0}, id="mig-by-profile"),
])
def test_capacity_by_kind_model_and_state(nodes: list[dict[str, Any]], expected: dict[Any, float]) -> None:
    assert capacity(nodes) == pytest.approx(expected)


def entry(i: int, state: EntryState = EntryState.QUEUED, held: bool = False, submitted: float = 100.0) -> QueueEntry:
    return QueueEntry(id=f"q{i:06d}" if i else "", name="j", team="t", priority=50, spec={}, submitted_at=submitted,
                      state=state, held=held)


def test_entries_by_state_counts_held_apart() -> None:
    tracked = [entry(1), entry(2, held=True), entry(3, EntryState.ADMITTED), entry(4, EntryState.RUNNING),
               entry(5, EntryState.RUNNING)]
    assert entry_counts(tracked) == {"queued": 1, "held": 1, "admitted": 1, "running": 2}


def test_scrape_time_families_are_in_the_registry_text() -> None:
    metrics = Metrics()
    reconnects = [0]
    metrics.read_at_scrape(capacity_reader(lambda: [{"gpus": [gpu(free=0)], "migs": [mig("3g.40gb", True)]}]))
    metrics.read_at_scrape(entries_reader(lambda: [entry(1, held=True)]))
    metrics.read_at_scrape(reconnects_reader(lambda: reconnects[0]))
    reconnects[0] = 3
    text = generate_latest(metrics.registry).decode()
    assert f'nomad_gpu_gpus{{kind="whole",model="{A100}",profile="",state="used"}} 1.0' in text
    assert f'nomad_gpu_gpus{{kind="mig",model="{H100}",profile="3g.40gb",state="free"}} 1.0' in text
    assert 'nomad_gpu_entries{state="held"} 1.0' in text and 'nomad_gpu_entries{state="running"} 0.0' in text
    assert "nomad_gpu_event_stream_reconnects_total 3.0" in text


