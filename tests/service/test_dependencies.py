"""`after:` dependencies: wait for success, end dependency-failed when a dependency ends badly, a sweep as a
dependency, only the submitting team's IDs, and a chain failing forward."""

from __future__ import annotations

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore


def job(name: str, *after: str, team: str = "t") -> dict[str, object]:
    return {"name": name, "team": team, "task": {"image": "b"}, "gpu": {"count": 1}, "after": list(after)}


@pytest.fixture
def svc() -> tuple[SchedulerService, ManualExecutor]:
    ex = ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), Clock(), ex)
    s.on_resync([gpu_node("n1", 4)], [])
    return s, ex


def run(s: SchedulerService, ex: ManualExecutor) -> None:
    s.run_cycle()
    ex.run_all()


def finish(s: SchedulerService, entry_id: str, status: str) -> None:
    e = s.store.get(entry_id)
    s.on_alloc(alloc(e.nomad_job_id, status, devices=tuple(i for p in e.placements for i in p["instance_ids"])))


def state(s: SchedulerService, entry_id: str) -> str:
    return s.store.get(entry_id).state.value


def test_waits_for_success_then_runs(svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, ex = svc
    a = s.submit(job("a"))[0].id
    b = s.submit(job("b", a))[0].id
    run(s, ex)
    assert state(s, a) == "admitted" and state(s, b) == "queued"
    assert s.store.get(b).reason == f"after: waiting for {a} (queued)"  # as it stood when the cycle began
    run(s, ex)
    assert s.store.get(b).reason == f"after: waiting for {a} (admitted)"
    finish(s, a, "running")
    finish(s, a, "complete")
    run(s, ex)
    assert state(s, a) == "complete" and state(s, b) == "admitted"


@pytest.mark.parametrize("end", ["failed", "cancelled"])
def test_a_dependency_that_ends_badly_fails_the_entry_without_running(svc: tuple[SchedulerService, ManualExecutor],
                                                                        end: str) -> None:
    s, ex = svc
    a = s.submit({**job("a"), "gpu": {"count": 4}})[0].id
    b = s.submit(job("b", a))[0].id
    c = s.submit(job("c", b))[0].id
    run(s, ex)
    if end == "failed":
        finish(s, a, "failed")
    else:
        s.cancel(a)
        finish(s, a, "complete")
    run(s, ex)
    assert state(s, a) in ("failed", "cancelled")
    assert state(s, b) == "dependency-failed" and s.store.get(b).reason == f"dependency {a} {state(s, a)}"
    run(s, ex)
    assert state(s, c) == "dependency-failed"  # a chain fails forward
    assert s.store.get(b).admitted_at is None and s.store.get(c).admitted_at is None


def test_a_sweep_as_a_dependency(svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, ex = svc
    trials = s.submit({"kind": "sweep", "name": "hpo", "team": "t", "task": {"image": "b"}, "gpu": {"count": 1},
                       "sweep": {"parameters": {"lr": [0.1, 0.2]}}})
    sweep_id = trials[0].sweep or ""
    final = s.submit(job("final", sweep_id))[0].id
    run(s, ex)
    assert s.store.get(final).reason == f"after: waiting for sweep {sweep_id} (2 of 2 trials not complete)"
    for t in trials:
        finish(s, t.id, "complete")
    run(s, ex)
    assert state(s, final) == "admitted"


def test_only_ids_of_the_same_team(svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, _ = svc
    theirs = s.submit(job("x", team="other"))[0].id
    with pytest.raises(InvalidRequest, match=f"after: no entry or sweep '{theirs}' of team 't'"):
        s.submit(job("y", theirs))
    with pytest.raises(InvalidRequest, match="after: no entry or sweep 'q999999' of team 't'"):
        s.submit(job("z", "q999999"))


def test_the_new_state_is_terminal_and_in_the_one_table() -> None:
    from nomad_gpu.store.entries import TRANSITIONS

    assert EntryState.DEPENDENCY_FAILED.is_terminal()
    assert EntryState.DEPENDENCY_FAILED in TRANSITIONS[EntryState.QUEUED]
    assert [s for s, to in TRANSITIONS.items() if EntryState.DEPENDENCY_FAILED in to] == [EntryState.QUEUED]
