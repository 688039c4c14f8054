"""Forecasts: the cycle run forward in simulated time; unknown where an end is unknown."""

from __future__ import annotations

from nomad_gpu.domain.cycle import CycleConfig
from nomad_gpu.domain.fairshare import UsageHistory
from nomad_gpu.domain.forecast import forecast_starts
from nomad_gpu.domain.ids import EntryId

from .builders import gpu_node, job, ledger_of, occupy, whole


def test_waiting_jobs_start_as_estimated_runs_end() -> None:
    ledger = ledger_of(gpu_node("n1", 1))
    occupy(ledger, "running", "n1", 1)
    queue = [job("a", whole(1), at=1.0), job("b", whole(1), at=2.0)]
    starts = forecast_starts(ledger, queue, ends={EntryId("running"): 100.0},
                             runtimes={EntryId("a"): 50.0, EntryId("b"): 10.0}, now=10.0, config=CycleConfig(),
                             usage=UsageHistory())
    assert starts == {"a": 100.0, "b": 150.0}
    assert ledger.get(EntryId("running")) is not None, "the real ledger is untouched"


def test_an_unknown_end_makes_what_waits_for_it_unknown() -> None:
    ledger = ledger_of(gpu_node("n1", 2))
    occupy(ledger, "running", "n1", 1)
    queue = [job("a", whole(1), at=1.0), job("b", whole(1), at=2.0), job("c", whole(1), at=3.0)]
    starts = forecast_starts(ledger, queue, ends={EntryId("running"): None},
                             runtimes={EntryId("a"): None, EntryId("b"): 5.0}, now=10.0, config=CycleConfig(),
                             usage=UsageHistory())
    assert starts == {"a": 10.0, "b": None, "c": None}, "a starts now; nothing frees for b, never a made-up time"
