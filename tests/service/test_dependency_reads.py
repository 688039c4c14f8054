"""A dependency is a counter, not a scan (issue 31, item 8): 20 entries `after:` a queued 10,000-trial sweep
made every cycle read and decode all 10,000 trials (another team's admission 0.01 s -> 1.95 s). The seam
counts the rows the store decodes while the cycle runs: with the counters the dependency check reads none
of the sweep's trials, however many it has."""

from __future__ import annotations

from typing import Any, cast

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service

from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

TRIALS = 400
DEPENDENTS = 20


def sweep(n: int) -> dict[str, Any]:
    return {"kind": "sweep", "name": "big", "team": "t", "task": {"image": "b"}, "gpu": {"count": 1},
            "sweep": {"parameters": {"lr": [i / 1000 for i in range(n)]}}}


def job(name: str, *after: str) -> dict[str, Any]:
    return {"name": name, "team": "t", "task": {"image": "b"}, "gpu": {"count": 1}, "after": list(after)}


def counted(s: SchedulerService, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows the store decodes (every read of an entry goes through `_rows.entry`)."""
    reads = [0]
    rows = cast(SqliteStore, s.store)._rows
    real = rows.entry

    def row(r: Any) -> Any:
        reads[0] += 1
        return real(r)

    monkeypatch.setattr(rows, "entry", row)
    return reads


def test_a_cycle_reads_no_trial_of_a_sweep_that_entries_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), Clock(), ex)
    s.on_resync([gpu_node("n1", 1)], [])
    trials = s.submit(sweep(TRIALS))
    sweep_id = trials[0].sweep or ""
    waiting = [s.submit(job(f"after-{i}", sweep_id))[0].id for i in range(DEPENDENTS)]
    s.run_cycle()  # admits one trial onto the one GPU; nothing else fits from now on
    ex.run_all()
    reads = counted(s, monkeypatch)
    for _ in range(3):
        s.run_cycle()
    assert reads[0] <= DEPENDENTS, f"{reads[0]} rows decoded in 3 cycles (the sweep has {TRIALS} trials)"
    reason = s.store.get(waiting[0]).reason
    assert reason == f"after: waiting for sweep {sweep_id} ({TRIALS} of {TRIALS} trials not complete)"


def test_the_counters_follow_every_way_a_trial_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admitted, running, complete through Nomad's events; the rest cancelled in one batch (the store's
    `cancel_queued`, which moves rows without `_move`): the dependent ends dependency-failed, naming a trial."""
    ex = ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), Clock(), ex)
    s.on_resync([gpu_node("n1", 1)], [])
    trials = s.submit(sweep(5))
    sweep_id = trials[0].sweep or ""
    final = s.submit(job("final", sweep_id))[0].id
    s.run_cycle()
    ex.run_all()
    first = s.store.get(trials[0].id)
    assert first.state.value == "admitted"
    s.on_alloc(alloc(first.nomad_job_id, "running", devices=tuple(first.placements[0]["instance_ids"])))
    s.on_alloc(alloc(first.nomad_job_id, "complete", devices=tuple(first.placements[0]["instance_ids"])))
    reads = counted(s, monkeypatch)
    s.run_cycle()
    ex.run_all()
    assert s.store.get(final).reason == f"after: waiting for sweep {sweep_id} (4 of 5 trials not complete)"
    assert reads[0] <= 5  # the trial admitted next is read to be moved and registered, the others never
    s.cancel_sweep(sweep_id)
    s.run_cycle()
    got = s.store.get(final)
    assert got.state.value == "dependency-failed"
    assert got.reason.startswith(f"dependency {sweep_id} trial q") and got.reason.endswith(" cancelled")
