"""Preemption through the service (service/loops/preemption.py), replayed with a fake Nomad, a manual executor and
a clock: what Nomad is told, in which order, and what a restart and a cancel leave."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, spec

from nomad_gpu.domain.ids import EntryId, NodeId
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus
from nomad_gpu.service.config.settings import SchedulingSettings, scheduling_from_mapping
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore

N1 = gpu_node("n1", 2)
FAST = scheduling_from_mapping({"preemption": {"min_runtime": "0s", "preempt_after": "0s"}, "tick_s": 0.01})


def job(name: str, cls: str, **extra: Any) -> dict[str, Any]:
    return {**spec(name), "class": cls, **extra}


def started(store: SqliteStore, nomad: FakeNomad, clock: Clock, ex: ManualExecutor,
            settings: SchedulingSettings = FAST, allocs: list[AllocInfo] | None = None) -> SchedulerService:
    svc = SchedulerService(store, nomad, settings, clock=clock, executor=ex)
    svc.on_resync([N1], allocs or [])
    return svc


def running(svc: SchedulerService, nomad: FakeNomad, ex: ManualExecutor, e: QueueEntry) -> AllocInfo:
    svc.run_cycle()
    ex.run_all()
    entry = svc.store.get(e.id)
    a = alloc(entry.nomad_job_id, node="n1", devices=tuple(str(p["instance_ids"][0]) for p in entry.placements))
    svc.on_alloc(a)
    assert svc.store.get(e.id).state is EntryState.RUNNING
    return a


def killed(a: AllocInfo, index: int = 50) -> AllocInfo:
    return replace(a, client_status=AllocStatus.COMPLETE, desired_status="stop", modify_index=index)


@pytest.fixture
def world() -> tuple[FakeNomad, SqliteStore, Clock, ManualExecutor]:
    return FakeNomad(), SqliteStore(), Clock(), ManualExecutor()


def test_serving_takes_an_exploratory_gpu_only_after_its_allocation_is_terminal(world) -> None:
    nomad, store, clock, ex = world
    svc = started(store, nomad, clock, ex)
    (x1,) = svc.submit(job("x1", "exploratory"))
    a1 = running(svc, nomad, ex, x1)
    (x2,) = svc.submit(job("x2", "exploratory"))
    a2 = running(svc, nomad, ex, x2)
    clock.now += 10
    (s,) = svc.submit(job("s", "serving"))
    svc.run_cycle()  # no GPU free: the serving job waits, then one exploratory job is preempted
    victim = next(e for e in (x1, x2) if store.get(e.id).state is EntryState.PREEMPTING)
    kept = x2 if victim is x1 else x1
    assert store.get(kept.id).state is EntryState.RUNNING
    assert store.get(victim.id).reason == "preempted by " + s.id + " (serving) on n1"
    assert [j for c, j in nomad.calls if c == "stop"] == []  # the stop is the executor's
    ex.run_all()
    job_id = store.get(victim.id).nomad_job_id
    assert ("stop", job_id) in nomad.calls and store.get(victim.id).state is EntryState.PREEMPTING
    svc.run_cycle()
    ex.run_all()
    assert store.get(s.id).state is EntryState.QUEUED, "desired stop is not enough: the GPU is still in use"
    assert store.get(s.id).reason.startswith(f"preempting {victim.id} on node n1")
    assert svc.status()["preemptions"][0]["stopping"] == [victim.id]
    svc.on_alloc(killed(a1 if victim is x1 else a2))
    back = store.get(victim.id)
    assert (back.state, back.attempts, back.retries_used) == (EntryState.QUEUED, 1, 0)
    assert back.reason == "preempted by " + s.id + " (serving) on n1"
    svc.run_cycle()
    ex.run_all()
    admitted = store.get(s.id)
    assert admitted.state is EntryState.ADMITTED
    assert admitted.placements[0]["node"] == "n1"
    assert svc.metrics.preemptions.labels("exploratory", "t")._value.get() == 1
    assert svc.status()["preemptions"] == []


def test_a_victim_that_exits_0_in_its_grace_is_complete(world) -> None:
    nomad, store, clock, ex = world
    svc = started(store, nomad, clock, ex)
    (x1,) = svc.submit(job("x1", "exploratory"))
    a1 = running(svc, nomad, ex, x1)
    (x2,) = svc.submit(job("x2", "exploratory"))
    a2 = running(svc, nomad, ex, x2)
    (s,) = svc.submit(job("s", "serving"))
    svc.run_cycle()
    ex.run_all()
    victim, a = (x1, a1) if store.get(x1.id).state is EntryState.PREEMPTING else (x2, a2)
    svc.on_alloc(replace(killed(a), stopped_zero=True))
    assert store.get(victim.id).state is EntryState.COMPLETE


@pytest.mark.parametrize(("extra", "cls"), [
    pytest.param({}, "training", id="training-without-checkpoint"),
    pytest.param({"preemptible": False}, "exploratory", id="opted-out"),
    pytest.param({}, None, id="no-class"),
])
def test_what_is_not_preemptible_is_never_stopped(world, extra: dict[str, Any], cls: str | None) -> None:
    nomad, store, clock, ex = world
    svc = started(store, nomad, clock, ex)
    tenants = []
    for name in ("x1", "x2"):
        body = {**job(name, cls or "exploratory"), **extra}
        if cls is None:
            body.pop("class")
        (e,) = svc.submit(body)
        running(svc, nomad, ex, e)
        tenants.append(e)
    (s,) = svc.submit(job("s", "serving"))
    for _ in range(3):
        svc.run_cycle()
        ex.run_all()
    assert all(store.get(e.id).state is EntryState.RUNNING for e in tenants)
    assert not any(c == "stop" for c, _ in nomad.calls)


def test_the_guards_hold_with_the_default_policy(world) -> None:
    nomad, store, clock, ex = world
    svc = started(store, nomad, clock, ex, settings=SchedulingSettings(tick_s=0.01))
    for name in ("x1", "x2"):
        (e,) = svc.submit(job(name, "exploratory"))
        running(svc, nomad, ex, e)
    (s,) = svc.submit(job("s", "serving"))
    svc.run_cycle()
    clock.now += 100  # past preempt_after (30 s), before min_runtime (5 min)
    svc.run_cycle()
    assert not any(c == "stop" for c, _ in nomad.calls)
    clock.now += 300
    svc.run_cycle()
    ex.run_all()
    assert sum(1 for c, _ in nomad.calls if c == "stop") == 1


def test_a_cancel_of_the_preemptor_releases_the_hold_and_requeues_each_victim_once(world) -> None:
    nomad, store, clock, ex = world
    svc = started(store, nomad, clock, ex)
    allocs = {}
    for name in ("x1", "x2"):
        (e,) = svc.submit(job(name, "exploratory"))
        allocs[e.id] = running(svc, nomad, ex, e)
    (s,) = svc.submit(job("s", "serving", gpu={"count": 2}))
    svc.run_cycle()
    ex.run_all()
    assert all(store.get(e).state is EntryState.PREEMPTING for e in allocs)
    svc.cancel(s.id)
    svc.run_cycle()
    assert svc.holds == {} and svc.status()["preemptions"] == []
    for i, a in enumerate(allocs.values()):
        svc.on_alloc(killed(a, 60 + i))
        svc.on_alloc(killed(a, 70 + i))  # a duplicated report
    assert [store.get(e).attempts for e in allocs] == [1, 1]
    assert all(store.get(e).state in (EntryState.QUEUED, EntryState.ADMITTED) for e in allocs)


def test_a_restart_while_victims_stop_resumes_the_preemption(world, tmp_path) -> None:
    nomad, _, clock, ex = world
    path = str(tmp_path / "q.db")
    store = SqliteStore(path)
    svc = started(store, nomad, clock, ex)
    allocs = {}
    for name in ("x1", "x2"):
        (e,) = svc.submit(job(name, "exploratory"))
        allocs[e.id] = running(svc, nomad, ex, e)
    (s,) = svc.submit(job("s", "serving", gpu={"count": 2}))
    (other,) = svc.submit(job("o", "exploratory", priority=10))
    svc.run_cycle()  # the preemption is stored; the stops never sent: the process dies here (kill -9)
    store.close()
    ex2 = ManualExecutor()
    svc2 = started(SqliteStore(path), nomad, clock, ex2, allocs=list(allocs.values()))
    ex2.run_all()  # the stored stop intents are sent again
    assert all(("stop", svc2.store.get(e).nomad_job_id) in nomad.calls for e in allocs), nomad.calls
    svc2.run_cycle()
    ex2.run_all()
    assert svc2.holds.get(EntryId(s.id)) == frozenset({NodeId("n1")}), "the hold is rebuilt from the stored reasons"
    for i, a in enumerate(allocs.values()):
        svc2.on_alloc(killed(a, 80 + i))
        svc2.run_cycle()
        ex2.run_all()
    assert svc2.store.get(s.id).state is EntryState.ADMITTED, "the freed GPUs went to the preemptor"
    assert svc2.store.get(other.id).state is EntryState.QUEUED


def test_a_restart_after_the_stops_were_sent_reads_their_end_again(world, tmp_path) -> None:
    """The stops were confirmed (their intents settled) before the kill -9; the allocations ended while the
    service was down: the restart stops again (a no-op) and its confirmation requeues the victims."""
    nomad, _, clock, ex = world
    path = str(tmp_path / "q.db")
    store = SqliteStore(path)
    svc = started(store, nomad, clock, ex)
    allocs = {}
    for name in ("x1", "x2"):
        (e,) = svc.submit(job(name, "exploratory"))
        allocs[e.id] = running(svc, nomad, ex, e)
    (s,) = svc.submit(job("s", "serving", gpu={"count": 2}))
    svc.run_cycle()
    ex.run_all()  # both stops sent and confirmed; the allocations still stopping
    assert store.stops() == []
    store.close()
    ex2 = ManualExecutor()
    svc2 = started(SqliteStore(path), nomad, clock, ex2, allocs=[killed(a, 90) for a in allocs.values()])
    ex2.run_all()
    assert all(svc2.store.get(e).state is EntryState.QUEUED for e in allocs)
    svc2.run_cycle()
    ex2.run_all()
    assert svc2.store.get(s.id).state is EntryState.ADMITTED


def test_a_preempted_entry_keeps_saying_why_without_a_write_each_cycle(world) -> None:
    nomad, store, clock, ex = world
    svc = started(store, nomad, clock, ex)
    allocs = {}
    for name in ("x1", "x2"):
        (e,) = svc.submit(job(name, "exploratory"))
        allocs[e.id] = running(svc, nomad, ex, e)
    (s,) = svc.submit(job("s", "serving"))
    svc.run_cycle()
    ex.run_all()
    victim = next(e for e in allocs if store.get(e).state is EntryState.PREEMPTING)
    svc.on_alloc(killed(allocs[victim]))
    svc.run_cycle()
    ex.run_all()
    assert store.get(s.id).state is EntryState.ADMITTED
    written: list[dict[str, str]] = []
    real = store.set_reasons

    def spy(reasons: dict[str, str]) -> None:
        written.append(dict(reasons))
        real(reasons)

    store.set_reasons = spy
    for _ in range(3):
        svc.run_cycle()
    reason = store.get(victim).reason
    assert reason.startswith(f"preempted by {s.id} (serving) on n1; "), reason
    assert sum(victim in w for w in written) <= 1, written
