"""The service's per-minute history: what a minute keeps, how admissions are counted, bounded memory."""

from __future__ import annotations

from typing import Any

from nomad_gpu.service.accounting.history import MINUTES, History, HistorySampler, reading

T0 = 1_800_000_000.0  # a minute boundary (divisible by 60)


def test_a_minute_keeps_its_peaks_and_counts_admissions_from_the_counter() -> None:
    h = History()
    h.record(T0 + 1, gpus_in_use=2.0, queued=10, admitted_total=5)  # the first reading: a baseline, no admissions
    h.record(T0 + 20, gpus_in_use=6.5, queued=4, admitted_total=9)
    h.record(T0 + 59, gpus_in_use=3.0, queued=7, admitted_total=9)
    h.record(T0 + 61, gpus_in_use=1.0, queued=0, admitted_total=12)
    first, second = h.minutes()
    assert (first.start, first.gpus_in_use, first.queued, first.admitted) == (T0, 6.5, 10, 4)
    assert (second.start, second.gpus_in_use, second.queued, second.admitted) == (T0 + 60, 1.0, 0, 3)


def test_memory_is_bounded_to_a_day_of_minutes() -> None:
    h = History()
    for m in range(MINUTES + 100):
        h.record(T0 + 60 * m, gpus_in_use=m % 8, queued=m % 5, admitted_total=m)
    kept = h.minutes()
    assert len(kept) == MINUTES
    assert kept[0].start == T0 + 60 * 100 and kept[-1].start == T0 + 60 * (MINUTES + 99)


def test_the_json_covers_the_last_24_hours_only() -> None:
    h = History(minutes=3 * MINUTES)
    h.record(T0, gpus_in_use=1, queued=1, admitted_total=0)
    h.record(T0 + 86_400 + 120, gpus_in_use=2, queued=0, admitted_total=1)
    out = h.to_json(T0 + 86_400 + 130)
    assert out["step_s"] == 60 and out["window_s"] == 86_400
    assert out["minutes"] == [{"t": T0 + 86_400 + 120, "gpus_in_use": 2, "queued": 0, "admitted": 1}]


def test_a_clock_stepping_back_never_reorders_the_minutes() -> None:
    h = History()
    h.record(T0 + 600, gpus_in_use=1, queued=1, admitted_total=0)
    h.record(T0, gpus_in_use=8, queued=9, admitted_total=1)
    assert [(m.start, m.gpus_in_use) for m in h.minutes()] == [(T0 + 600, 1)]


def test_a_counter_that_restarts_counts_no_negative_admissions() -> None:
    h = History()
    h.record(T0, gpus_in_use=0, queued=0, admitted_total=50)
    h.record(T0 + 60, gpus_in_use=0, queued=0, admitted_total=2)
    assert [m.admitted for m in h.minutes()] == [0, 0]


def test_the_sampler_reads_the_schedulers_status() -> None:
    now = [T0 + 5]
    status: dict[str, Any] = {"queued": 3, "team_usage_gpu": {"a": 1.5, "b": 2.0}}
    admitted = [0.0]
    sampler = HistorySampler(History(), lambda: status, lambda: admitted[0], clock=lambda: now[0])
    sampler.sample()
    admitted[0], status["queued"], now[0] = 2.0, 1, T0 + 65
    sampler.sample()
    assert [m.to_json() for m in sampler.history.minutes()] == [
        {"t": T0, "gpus_in_use": 3.5, "queued": 3, "admitted": 0},
        {"t": T0 + 60, "gpus_in_use": 3.5, "queued": 1, "admitted": 2}]
    assert reading({}) == (0.0, 0)


def test_the_sampler_thread_stops_promptly() -> None:
    calls: list[int] = []

    def sample() -> dict[str, Any]:
        calls.append(1)
        return {}

    sampler = HistorySampler(History(), sample, lambda: 0.0, interval_s=3600)
    sampler.start()
    sampler.stop()
    assert sampler._thread is not None and not sampler._thread.is_alive() and calls == [1]
