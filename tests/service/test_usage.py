"""Idle GPUs: the usage book's idle rule on a fake clock, and the poller's bounded, failure-proof rounds."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import NodeId
from nomad_gpu.nomad.client import NomadUnavailable
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus
from nomad_gpu.nomad.stats import DeviceUsage
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.config.usageconfig import UsageSettings, usage_from_mapping
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.service.loops.usage import UsageBook, UsagePoller

SETTINGS = UsageSettings(interval_s=10, idle_util_pct=5, idle_mig_memory_mib=512, idle_after_s=600, max_allocs=2)


def gpu(device: str, util: float | None, used: float | None = None, total: float | None = None) -> DeviceUsage:
    return DeviceUsage(device, util, used, total)


def test_a_gpu_is_idle_only_after_staying_below_the_threshold_long_enough() -> None:
    book = UsageBook(SETTINGS)
    assert not book.record("e", [gpu("GPU-a", 3.0)], now=1000).idle
    assert not book.record("e", [gpu("GPU-a", 4.9)], now=1599).idle
    usage = book.record("e", [gpu("GPU-a", 2.0)], now=1600)
    assert usage.idle and usage.idle_gpus == {"gpu": 1, "mig": 0} and usage.idle_since == 1000
    assert book.idle_counts() == {"gpu": 1, "mig": 0}
    assert not book.record("e", [gpu("GPU-a", 40.0)], now=1700).idle  # busy again: the clock restarts
    assert not book.record("e", [gpu("GPU-a", 1.0)], now=1800).idle
    assert not book.record("e", [gpu("GPU-a", 1.0)], now=2399).idle
    assert book.record("e", [gpu("GPU-a", 1.0)], now=2400).idle


def test_mig_is_idle_by_memory_and_missing_figures_are_never_idle() -> None:
    book = UsageBook(SETTINGS)
    for now in (0, 600):
        usage = book.record("e", [gpu("MIG-a", None, 100, 9984), gpu("MIG-b", None, 4000, 9984),
                                  gpu("GPU-c", None), gpu("MIG-d", None)], now=now)
    assert usage.idle_gpus == {"gpu": 0, "mig": 1}
    assert usage.utilisation_pct is None and usage.memory_used_mib == 4100 and usage.memory_total_mib == 2 * 9984


def test_shares_are_read_once_per_gpu_and_never_called_idle() -> None:
    book = UsageBook(SETTINGS)
    for now in (0, 10_000):
        usage = book.record("e", [gpu("GPU-a-share-0", 0.0, 1000, 46068), gpu("GPU-a-share-1", 0.0, 1000, 46068)],
                            now=now)
    assert not usage.idle and usage.memory_used_mib == 1000 and usage.utilisation_pct == 0.0


def test_entries_that_stop_running_are_forgotten() -> None:
    book = UsageBook(SETTINGS)
    book.record("e", [gpu("GPU-a", 0.0)], now=0)
    book.record("e", [gpu("GPU-a", 0.0)], now=600)
    book.retain(["other"])
    assert book.get("e") is None and book.idle_counts() == {"gpu": 0, "mig": 0}
    assert not book.record("e", [gpu("GPU-a", 0.0)], now=601).idle  # a new run starts its own clock


def test_an_entry_is_wholly_idle_only_while_every_device_reports_idle_figures() -> None:
    """Idle reclaim's clock: from when the last of its devices went idle; a busy device, a device without
    figures, a share (a whole GPU's figures, not its tenant's) or a round that missed an allocation: not idle."""
    book = UsageBook(SETTINGS)
    assert book.record("e", [gpu("GPU-a", 1.0), gpu("GPU-b", 50.0)], now=100).all_idle_since is None
    assert book.record("e", [gpu("GPU-a", 1.0), gpu("GPU-b", 2.0)], now=200).all_idle_since == 200
    assert book.record("e", [gpu("GPU-a", 1.0), gpu("GPU-b", 2.0)], now=300).all_idle_since == 200
    assert book.record("e", [gpu("GPU-a", 1.0), gpu("GPU-b", None)], now=400).all_idle_since is None
    assert book.record("e", [gpu("GPU-a", 1.0)], now=500, complete=False).all_idle_since is None
    assert book.record("f", [gpu("GPU-s-share-0", 0.0)], now=500).all_idle_since is None
    assert book.record("g", [], now=500).all_idle_since is None


def test_json_fields() -> None:
    usage = UsageBook(SETTINGS).record("e", [gpu("GPU-a", 33.333, 1024.25, 81920)], now=5)
    assert usage.to_json() == {"gpu_util_pct": 33.3, "gpu_memory_used_mib": 1024.2, "gpu_memory_total_mib": 81920,
                               "idle": False, "idle_gpus": 0, "idle_since": None, "sampled_at": 5,
                               "idle_for_s": None, "idle_warned": False, "idle_note": "", "reclaim_in_s": None,
                               "kept_until": None}


@pytest.mark.parametrize(("raw", "message"), [
    ({"interval": 1}, "unknown key"), ({"timeout_s": 0}, "timeout_s must be > 0"),
    ({"idle_after_s": -1}, "must be a number >= 0"), ({"max_allocs": True}, "must be a number"), ([], "mapping"),
])
def test_bad_usage_settings_are_refused(raw: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        usage_from_mapping(raw)


# ---- the poller ----------------------------------------------------------------------------------

def _alloc(alloc_id: str, devices: tuple[str, ...], status: AllocStatus = AllocStatus.RUNNING) -> AllocInfo:
    return AllocInfo(alloc_id, "job", "main", NodeId("n1"), status, "run", device_ids=devices)  # type: ignore[arg-type]


@dataclass
class _Tracked:
    allocs: dict[str, AllocInfo]


@dataclass
class _Life:
    entries: dict[str, _Tracked] = field(default_factory=dict)


class _Scheduler:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.life = _Life()


def _stats(device: str, util: int) -> dict[str, Any]:
    value = {"IntNumeratorVal": util, "Unit": "%"}
    return {"ResourceUsage": {"DeviceStats": [{"Vendor": "nvidia", "Type": "gpu", "Name": "A100", "InstanceStats": {
        device: {"Summary": value, "Stats": {"Attributes": {"GPU utilization": value}}}}}]}, "Tasks": {}}


class _Source:
    def __init__(self, util: dict[str, int], failing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.util, self.failing = util, set(failing)
        self.calls: list[tuple[str, float]] = []

    def alloc_stats(self, alloc_id: str, timeout_s: float) -> dict[str, Any]:
        self.calls.append((alloc_id, timeout_s))
        if alloc_id in self.failing:
            raise NomadUnavailable("read stats: timed out")
        return _stats(f"GPU-{alloc_id}", self.util[alloc_id])


def _poller(source: _Source, scheduler: _Scheduler, now: list[float], metrics: Metrics) -> UsagePoller:
    return UsagePoller(source, cast(SchedulerService, scheduler), SETTINGS, metrics, clock=lambda: now[0])


def test_rounds_are_bounded_read_the_stalest_first_and_move_the_idle_gauge(caplog: pytest.LogCaptureFixture) -> None:
    scheduler, metrics, now = _Scheduler(), Metrics(), [0.0]
    scheduler.life.entries = {
        "q1": _Tracked({"a1": _alloc("a1", ("GPU-a1",))}),
        "q2": _Tracked({"a2": _alloc("a2", ("GPU-a2",))}),
        "q3": _Tracked({"a3": _alloc("a3", ("GPU-a3",))}),
        "q4": _Tracked({"a4": _alloc("a4", ("GPU-a4",), AllocStatus.PENDING), "a5": _alloc("a5", ())}),
    }
    source = _Source({"a1": 1, "a2": 90, "a3": 2}, failing={"a3"})
    poller = _poller(source, scheduler, now, metrics)

    def idle() -> float | None:
        return metrics.registry.get_sample_value("nomad_gpu_idle_gpus", {"kind": "gpu"})

    assert poller.poll_once() == 2 and [c[0] for c in source.calls] == ["a1", "a2"]
    assert all(t == SETTINGS.timeout_s for _, t in source.calls)
    now[0] = 5
    assert poller.poll_once() == 1 and source.calls[2][0] == "a3"  # never read yet: first; it fails
    assert "cannot read the stats of allocation a3" in caplog.text
    for t in (300.0, 601.0, 700.0):
        now[0] = t
        poller.poll_once()
    assert idle() == 1
    assert poller.fields("q1")["usage"]["idle"] is True and poller.fields("q2")["usage"]["gpu_util_pct"] == 90
    assert poller.fields("q3") == {"usage": None} and poller.fields("q4") == {"usage": None}
    with scheduler._lock:
        del scheduler.life.entries["q1"]  # it ended
    now[0] = 710
    poller.poll_once()
    assert idle() == 0 and poller.fields("q1") == {"usage": None}


def test_the_poller_thread_starts_only_when_enabled() -> None:
    poller = UsagePoller(_Source({}), cast(SchedulerService, _Scheduler()), UsageSettings(interval_s=0), Metrics())
    poller.start()
    assert poller._thread is None
    poller.stop()
