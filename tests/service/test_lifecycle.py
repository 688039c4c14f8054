"""The life cycle, replayed deterministically with a fake Nomad, a manual executor and a clock.

Each scenario is one of the crash windows and races found in the service (the faults issue, items
1-8, and interruptions from the real-Nomad issue); each checks what Nomad was told, not only what
the service believes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.nomad.client import NomadUnavailable
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.service.config.runtimes import RuntimeDefaults
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore

N1 = gpu_node("n1", 1)  # one GPU: a second job can only ever land on the first one's GPU


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ex() -> ManualExecutor:
    return ManualExecutor()


def started(store: SqliteStore, nomad: FakeNomad, clock: Clock, ex: ManualExecutor) -> SchedulerService:
    svc = service(store, nomad, clock, ex)
    svc.on_resync([N1], [])
    return svc


def restarted(path: str, nomad: FakeNomad, clock: Clock, allocs: list[AllocInfo] | None = None,
              ) -> tuple[SchedulerService, ManualExecutor]:
    """A new service process on the same database, after the old one died: resynced with `allocs`."""
    ex2 = ManualExecutor()
    svc2 = service(SqliteStore(path), nomad, clock, ex2)
    svc2.on_resync([N1], allocs or [])
    return svc2, ex2


def test_a_cancel_during_the_register_stops_the_job_after_it_and_keeps_the_gpu(clock: Clock,
                                                                               ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    (b,) = svc.submit(spec("b"))
    svc.run_cycle()
    nomad.during_submit = lambda: svc.cancel(a.id)  # the click lands while the register is on the wire
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    assert nomad.calls.index(("register", job)) < nomad.calls.index(("stop", job))
    assert nomad.jobs[job].stopped
    assert store.get(a.id).state is EntryState.CANCELLED
    svc.run_cycle()
    assert store.get(b.id).state is EntryState.QUEUED, "the GPU went to b while a's job may still run"
    svc.on_alloc(alloc(job, "complete", desired="stop"))
    svc.run_cycle()
    ex.run_all()
    assert store.get(b.id).state is EntryState.ADMITTED


def test_a_cancel_before_the_register_ran_sends_nothing(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    svc.cancel(a.id)
    ex.run_all()
    assert nomad.registers() == []
    assert not svc.life.draining and not list(svc.ledger.reservations())


def test_a_lost_register_reply_keeps_the_pins_and_never_registers_twice(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(lose_reply=1), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    (b,) = svc.submit(spec("b"))
    svc.run_cycle()
    ex.run_all()
    pins = store.get(a.id).placements
    assert store.get(a.id).state is EntryState.ADMITTED and svc.outage.down
    clock.now += 60
    svc.run_cycle()  # the retry is due: same attempt, same pins, create-only finds its own job
    ex.run_all()
    assert store.get(a.id).placements == pins and store.get(a.id).registered_at is not None
    assert len(nomad.jobs) == 1 and store.get(b.id).state is EntryState.QUEUED
    assert not svc.outage.down


def test_restart_after_the_job_was_collected_never_runs_it_again(tmp_path: Path, clock: Clock,
                                                                 ex: ManualExecutor) -> None:
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    store = SqliteStore(path)
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running"))
    assert store.get(a.id).state is EntryState.RUNNING
    store.close()  # the service dies; the job completes and Nomad's GC removes it
    del nomad.jobs[job]
    svc2, ex2 = restarted(path, nomad, clock)
    ex2.run_all()
    assert nomad.registers() == [job]
    e = svc2.store.get(a.id)
    assert e.state is EntryState.FAILED and "outcome unknown" in e.reason


def test_restart_with_an_unacknowledged_register_registers_create_only(tmp_path: Path, clock: Clock,
                                                                       ex: ManualExecutor) -> None:
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    store = SqliteStore(path)
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()  # killed before the pool ran the register
    store.close()
    svc2, ex2 = restarted(path, nomad, clock)
    ex2.run_all()
    assert len(nomad.registers()) == 1 and svc2.store.get(a.id).registered_at is not None


def test_a_database_error_mid_cycle_rolls_the_cycle_back(clock: Clock, ex: ManualExecutor,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))

    def locked(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store, "admit_many", locked)
    svc.run_cycle()
    ex.run_all()
    assert nomad.registers() == [] and not list(svc.ledger.reservations())
    monkeypatch.undo()
    svc.run_cycle()
    ex.run_all()
    assert store.get(a.id).state is EntryState.ADMITTED and len(nomad.registers()) == 1


def test_a_failed_stop_is_retried_with_backoff_and_after_a_restart(tmp_path: Path, clock: Clock,
                                                                    ex: ManualExecutor) -> None:
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    store = SqliteStore(path)
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    nomad.fail = NomadUnavailable("stop: cannot reach Nomad")
    svc.cancel(a.id)
    ex.run_all()
    assert [s.job_id for s in store.stops()] == [job] and not nomad.jobs[job].stopped
    svc.run_cycle()
    ex.run_all()
    assert nomad.calls.count(("stop", job)) == 1, "retried before its backoff"
    store.close()  # and the service dies before Nomad comes back
    nomad.fail = None
    svc2, ex2 = restarted(path, nomad, clock)
    ex2.run_all()
    assert nomad.jobs[job].stopped and svc2.store.stops() == []


def test_with_nomad_down_admissions_pause_and_requests_stay_few(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(fail=NomadUnavailable("cannot reach Nomad")), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 8)], [])
    for i in range(8):
        svc.submit(spec(f"j{i}"))
    for _ in range(200):  # 2 s of cycles every 10 ms
        svc.run_cycle()
        ex.run_all()
        clock.now += 0.01
    registers = [c for c in nomad.calls if c[0] == "register"]
    probes = [c for c in nomad.calls if c[0] == "ping"]
    assert len(registers) <= 8 * 3 and len(probes) <= 3, nomad.calls  # probes back off: 0.5, 1, 2 s ...
    assert svc.outage.down


@pytest.mark.parametrize(("client", "desired", "migrate", "next_alloc"), [
    pytest.param("complete", "stop", False, "", id="killed-by-stop"),
    pytest.param("complete", "evict", False, "", id="evicted"),
    pytest.param("complete", "run", True, "", id="drain-migrate"),
    pytest.param("complete", "run", False, "a-next", id="replaced"),
])  # a lost one is queued again without a retry and keeps its GPU: tests/service/test_lost_attempts.py
def test_an_interrupted_allocation_is_not_success(client: str, desired: str, migrate: bool, next_alloc: str,
                                                  clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a", retries=1))
    (b,) = svc.submit(spec("b"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=10))
    svc.on_alloc(alloc(job, client, desired=desired, migrate=migrate, next_alloc=next_alloc, index=11))
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and e.attempts == 1 and "retrying" in e.reason
    # its job is stopped first; meanwhile a replacement Nomad placed holds the GPU
    svc.on_alloc(alloc(job, "pending", alloc_id="a-next", index=12))
    ex.run_all()
    assert nomad.jobs[job].stopped
    svc.run_cycle()
    assert store.get(b.id).state is EntryState.QUEUED and store.get(a.id).state is EntryState.QUEUED
    svc.on_alloc(alloc(job, "complete", desired="stop", alloc_id="a-next", index=13))
    svc.run_cycle()
    ex.run_all()
    admitted = [x for x in (a.id, b.id) if store.get(x).state is EntryState.ADMITTED]
    assert len(admitted) == 1


def test_success_needs_desired_run_and_no_replacement(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=10))
    svc.on_alloc(alloc(job, "complete", index=11))
    assert store.get(a.id).state is EntryState.COMPLETE
    assert not list(svc.ledger.reservations()), "a clean end releases at once"
    ex.run_all()
    assert not nomad.jobs[job].stopped and ("stop", job) not in nomad.calls, \
        "a batch job that completed by itself is left dead-complete, no stop round trip"


def test_a_job_of_this_database_that_no_entry_claims_is_stopped(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    orphan = f"ngpu-{store.instance}-q000042"
    other = "ngpu-abcdef-q000042" if store.instance != "abcdef" else "ngpu-fedcba-q000042"
    svc.on_resync([N1], [alloc(orphan, "running", alloc_id="x1"), alloc(other, "running", alloc_id="x2",
                                                                         devices=("GPU-n1-0",))])
    ex.run_all()
    assert ("stop", orphan) in nomad.calls and ("stop", other) not in nomad.calls


def test_a_placement_nomad_refuses_is_requeued_away_from_that_node_without_using_a_retry(
        clock: Clock, ex: ManualExecutor) -> None:
    from nomad_gpu.nomad.evaldecode import EvalInfo

    nomad, store = FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 1), gpu_node("n2", 1)], [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    first = store.get(a.id)
    node = first.placements[0]["node"]
    # the register's evaluation: complete with FailedTGAllocs, then a blocked follow-up (reference section 8)
    svc.on_eval(EvalInfo("e1", first.nomad_job_id, "default", "complete", "job-register",
                         'group main: 1 node(s) evaluated; missing drivers (1)'))
    svc.on_eval(EvalInfo("e2", first.nomad_job_id, "default", "blocked", "queued-allocs"))
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and "missing drivers" in e.reason
    assert e.retries_used == 0 and e.refusals == 1
    ex.run_all()
    assert nomad.jobs[first.nomad_job_id].stopped
    svc.run_cycle()
    ex.run_all()
    # the refused job's allocation (the fake lists one) is not terminal yet: Nomad may still run it, so the next
    # attempt waits for it (an entry never runs twice at once)
    assert store.get(a.id).state is EntryState.QUEUED
    svc.on_alloc(alloc(first.nomad_job_id, "complete", node=node, desired="stop", index=99))
    svc.run_cycle()
    ex.run_all()
    again = store.get(a.id)
    assert again.state is EntryState.ADMITTED and again.placements[0]["node"] != node
    t = svc.life.entries[a.id]
    t.entry = t.entry.__class__(**{**t.entry.__dict__, "state": EntryState.QUEUED})
    svc.life.waiting[a.id] = t  # as if queued again (only the avoid list's expiry is looked at here)
    clock.now += 301  # the refused node is a candidate again after a while
    assert svc.life.queued(clock.now)[0].request.avoid_nodes == frozenset()


def test_an_admission_nomad_never_places_is_requeued_after_the_deadline(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    clock.now += 299
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.ADMITTED
    clock.now += 2
    svc.run_cycle()
    e = store.get(a.id)
    assert e.refusals == 1 and "within 300 s" in e.history[-1]["reason"]


def test_cpu_held_by_a_plain_job_without_gpus_counts(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    system = alloc("node-exporter", "running", devices=(), alloc_id="sys1")
    system = system.__class__(**{**system.__dict__, "cpu_mhz": 63_500, "memory_mb": 1024})
    svc.on_resync([N1], [system])
    (a,) = svc.submit(spec("a"))  # 1,000 MHz: Nomad would refuse it for CPU
    svc.run_cycle()
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and "CPU" in e.reason


def test_a_token_nomad_refuses_fails_nothing_and_pauses_admissions(clock: Clock, ex: ManualExecutor) -> None:
    from nomad_gpu.nomad.client import NomadForbidden

    nomad, store = FakeNomad(fail=NomadForbidden("register: permission denied")), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 4)], [])
    entries = [svc.submit(spec(f"j{i}"))[0] for i in range(3)]
    svc.run_cycle()
    ex.run_all()
    assert all(store.get(e.id).state is not EntryState.FAILED for e in entries)
    assert svc.outage.down and b'nomad_gpu_nomad_errors_total{kind="forbidden"}' in svc.metrics.render()
    svc.submit(spec("later"))
    svc.run_cycle()
    assert store.list([EntryState.QUEUED])[0].name == "later", "admissions pause while the token is refused"


def test_finished_entries_are_deleted_after_the_retention(clock: Clock, ex: ManualExecutor) -> None:
    from dataclasses import replace as _replace

    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    svc.settings = _replace(svc.settings, retention_s=3600.0)
    old, new = svc.submit(spec("old"))[0], svc.submit(spec("new"))[0]
    svc.cancel(old.id)
    clock.now += 3601
    svc.cancel(new.id)
    assert svc.purge_finished() == 1
    assert [e.id for e in store.list()] == [new.id]


def test_team_metric_labels_are_bounded() -> None:
    from nomad_gpu.service.accounting.metrics import MAX_TEAM_LABELS, Metrics

    m = Metrics()
    m.set_queue(0, 0, {f"team-{i}": 1.0 for i in range(MAX_TEAM_LABELS + 50)})
    text = m.render().decode()
    assert text.count("nomad_gpu_team_gpu_in_use{") == MAX_TEAM_LABELS + 1 and 'team="_other"} 50.0' in text


def test_a_held_entry_keeps_its_place_but_is_not_admitted(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    (b,) = svc.submit(spec("b"))
    assert svc.hold(a.id).held
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.QUEUED and store.get(b.id).state is EntryState.ADMITTED
    assert store.get(a.id).reason == "held by user"
    svc.release(a.id)
    svc.on_alloc(alloc(store.get(b.id).nomad_job_id, "complete", index=20))
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.ADMITTED
    with pytest.raises(Exception, match="only a queued entry"):
        svc.hold(a.id)


def test_requeue_stops_the_job_drains_and_uses_no_retry(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running"))
    e = svc.requeue(a.id)
    ex.run_all()
    assert e.state is EntryState.QUEUED and e.retries_used == 0 and nomad.jobs[job].stopped
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.QUEUED, "its GPU is free only once Nomad confirms the old job ended"
    svc.on_alloc(alloc(job, "complete", desired="stop", index=30))
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.ADMITTED and store.get(a.id).nomad_job_id != job


def test_priority_can_change_while_queued(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (blocker,) = svc.submit(spec("blocker"))
    svc.run_cycle()
    (a,) = svc.submit(spec("a"))
    (b,) = svc.submit(spec("b"))
    svc.update(b.id, priority=90)
    svc.on_alloc(alloc(store.get(blocker.id).nomad_job_id, "complete", index=20))
    svc.run_cycle()
    assert store.get(b.id).state is EntryState.ADMITTED and store.get(a.id).state is EntryState.QUEUED
    with pytest.raises(Exception, match="priority"):
        svc.update(a.id, priority=0)


def test_max_runtime_stops_the_job_and_fails_the_entry_with_timeout(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit({**spec("a", retries=3), "max_runtime": "1h"})
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running"))
    clock.now += 3599
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.RUNNING
    clock.now += 2
    svc.run_cycle()
    ex.run_all()
    e = store.get(a.id)
    assert e.state is EntryState.FAILED and e.reason.startswith("timeout") and nomad.jobs[job].stopped


def test_max_runtime_is_enforced_after_a_restart_from_the_admission(tmp_path: Path, clock: Clock,
                                                                      ex: ManualExecutor) -> None:
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    store = SqliteStore(path)
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit({**spec("a"), "max_runtime": "1h"})
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    running = alloc(job, "running")
    svc.on_alloc(running)
    store.close()  # the service dies while the job runs
    svc2, ex2 = restarted(path, nomad, clock, [running])
    clock.now += 3599
    svc2.run_cycle()
    assert svc2.store.get(a.id).state is EntryState.RUNNING
    clock.now += 2
    svc2.run_cycle()
    ex2.run_all()
    e = svc2.store.get(a.id)
    assert e.state is EntryState.FAILED and e.reason.startswith("timeout") and nomad.jobs[job].stopped


def test_the_admission_deadline_holds_after_a_restart(tmp_path: Path, clock: Clock, ex: ManualExecutor) -> None:
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    store = SqliteStore(path)
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    store.close()  # registered, never placed, and the service dies
    # its settle (a read of the job) is left unanswered: Nomad placed nothing
    svc2, ex2 = restarted(path, nomad, clock)
    clock.now += 299
    svc2.run_cycle()
    assert svc2.store.get(a.id).state is EntryState.ADMITTED
    clock.now += 2
    svc2.run_cycle()
    e = svc2.store.get(a.id)
    assert e.refusals == 1 and "within 300 s" in e.history[-1]["reason"]


def test_due_times_of_ended_entries_do_not_accumulate(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    for i in range(5000):
        svc.life._schedule(clock.now + 3600, f"gone{i}")  # entries that ended before their due time
    assert len(svc.life.due) <= 1000 + 4 * len(svc.life.live)


def test_cancelling_a_sweep_cancels_every_trial(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    sweep = {"kind": "sweep", "name": "hpo", "team": "t", "task": {"image": "busybox"},
             "resources": {"cpu": 1000, "memory": 1024}, "gpu": {"count": 1},
             "sweep": {"parameters": {"lr": [0.1, 0.01, 0.001]}}}
    trials = svc.submit(sweep)
    svc.run_cycle()
    ex.run_all()
    out = svc.cancel_sweep(trials[0].sweep or "")
    assert {e.state for e in out} == {EntryState.CANCELLED}
    ex.run_all()
    assert all(j.stopped for j in nomad.jobs.values())


def test_etas_follow_the_runtime_estimates(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (run,) = svc.submit({**spec("running"), "runtime": "10m"})
    svc.run_cycle()
    ex.run_all()
    svc.on_alloc(alloc(store.get(run.id).nomad_job_id, "running"))
    (a,) = svc.submit({**spec("a"), "runtime": 60})
    (b,) = svc.submit(spec("b"))  # no runtime: it starts when a ends, and runs the batch template's default
    (c,) = svc.submit(spec("c"))
    etas = svc.etas()
    assert etas == {run.id: (clock.now + 600, "runtime"), a.id: (clock.now + 600, "runtime"),
                    b.id: (clock.now + 660, "runtime"),
                    c.id: (clock.now + 660 + 3600, "estimate from template batch default")}
    svc.settings = replace(svc.settings, runtime_defaults=RuntimeDefaults(templates={}))
    assert svc.etas()[c.id] == (None, "")  # without a default nothing after b is known


def test_each_committed_admission_observes_its_wait_and_a_rolled_back_one_none(
        clock: Clock, ex: ManualExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    svc.submit(spec("a"))
    clock.now += 90
    monkeypatch.setattr(store, "admit_many", lambda *a, **k: (_ for _ in ()).throw(sqlite3.OperationalError("locked")))
    svc.run_cycle()
    value = svc.metrics.registry.get_sample_value
    assert not value("nomad_gpu_wait_seconds_count")
    monkeypatch.undo()
    svc.run_cycle()
    assert value("nomad_gpu_wait_seconds_count") == 1 and value("nomad_gpu_wait_seconds_sum") == 90.0


def test_the_live_index_always_matches_the_entries(clock: Clock, ex: ManualExecutor) -> None:
    from nomad_gpu.service.life.tracking import LIVE

    nomad, store = FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 3)], [])

    def check() -> None:
        assert set(svc.life.live) == {k for k, t in svc.life.entries.items() if t.entry.state in LIVE}
        assert set(svc.life.waiting) == {k for k, t in svc.life.entries.items() if t.entry.state is EntryState.QUEUED}

    a, b, c, d = (svc.submit(spec(n, retries=1))[0] for n in "abcd")
    svc.run_cycle()
    ex.run_all()
    check()
    svc.on_alloc(alloc(store.get(a.id).nomad_job_id, "running", alloc_id="x1"))
    svc.on_alloc(alloc(store.get(b.id).nomad_job_id, "running", alloc_id="x2", devices=("GPU-n1-1",)))
    check()
    svc.cancel(c.id)
    svc.requeue(b.id)
    svc.on_alloc(alloc(store.get(a.id).nomad_job_id, "failed", alloc_id="x1", index=20))
    ex.run_all()
    check()
    svc.run_cycle()
    ex.run_all()
    check()
    assert d.id in svc.life.entries


def test_a_burst_of_submissions_is_admitted_in_one_coalesced_cycle(clock: Clock, ex: ManualExecutor) -> None:
    """Cycles start at least `min_cycle_interval_s` apart; what arrives meanwhile joins the next one."""
    import threading
    from collections.abc import Iterable

    from nomad_gpu.domain.cycle import Admit
    from nomad_gpu.service.config.settings import SchedulingSettings

    nomad, store = FakeNomad(), SqliteStore()
    svc = SchedulerService(store, nomad, SchedulingSettings(tick_s=60, min_cycle_interval_s=1.0), clock=clock,
                           executor=ex)
    svc.on_resync([gpu_node("n1", 8)], [])
    admitted = threading.Event()
    original = svc.life.admit

    def admit(admits: Iterable[Admit], now: float) -> int:
        n = original(admits, now)
        if n:
            admitted.set()
        return n

    svc.life.admit = admit  # type: ignore[method-assign]
    svc.start()
    try:
        cycles0 = svc.cycles
        for name in "abcdefgh":
            svc.submit(spec(name))  # eight wakes, well inside one interval
        for _ in range(2):  # the first wake finds a quiet queue and runs at once; the rest wait for the next
            assert admitted.wait(10)
            admitted.clear()
            if sum(store.get(e.id).state is EntryState.ADMITTED for e in store.list()) == 8:
                break
        assert sum(store.get(e.id).state is EntryState.ADMITTED for e in store.list()) == 8
        assert svc.cycles - cycles0 <= 2
    finally:
        svc.stop()


def test_the_cycle_interval_is_bounded_in_the_config() -> None:
    from nomad_gpu.service.config.settings import scheduling_from_mapping

    assert scheduling_from_mapping({"min_cycle_interval_s": 0}).min_cycle_interval_s == 0
    with pytest.raises(ValueError, match="min_cycle_interval_s: must be from 0 to 1 seconds"):
        scheduling_from_mapping({"min_cycle_interval_s": 5})


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "jobspecs").glob("*.yaml")), ids=lambda p: p.name)
def test_a_validated_spec_is_what_its_stored_form_validates_to(path: Path) -> None:
    """Submissions hand their validated spec to the life cycle instead of validating the stored copy again:
    the two must be the same model (every trial of a sweep too)."""
    from nomad_gpu.render import JobSpec, load_spec, parse_spec
    from nomad_gpu.render.sweep import expand_sweep

    spec = load_spec(path)
    jobs = [spec] if isinstance(spec, JobSpec) else expand_sweep(spec)
    for job in jobs:
        assert parse_spec(job.model_dump(mode="json")) == job


def test_an_outage_ends_by_itself_when_nothing_is_left_to_retry(clock: Clock, ex: ManualExecutor) -> None:
    """A lost register reply pauses admissions; the job ran anyway and completed (its events said so), so
    no retry and no stop will ever talk to Nomad again: a probe must find that Nomad answers."""
    nomad, store = FakeNomad(lose_reply=1), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    assert svc.outage.down
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=11))
    svc.on_alloc(alloc(job, "complete", index=12))
    assert store.get(a.id).state is EntryState.COMPLETE
    (b,) = svc.submit(spec("b"))
    for _ in range(3):
        clock.now += 5
        svc.run_cycle()
        ex.run_all()
    assert not svc.outage.down
    svc.run_cycle()
    ex.run_all()
    assert store.get(b.id).state is EntryState.ADMITTED


def test_probes_back_off_while_nomad_stays_down(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    nomad.fail = NomadUnavailable("connection refused")
    svc.outage.unreachable("connection refused")
    for _ in range(40):
        clock.now += 0.25
        svc.run_cycle()
        ex.run_all()
    probes = [c for c in nomad.calls if c[0] == "ping"]
    assert 2 <= len(probes) <= 6  # 10 s of outage: backoff 0.5, 1, 2, 4 s ...
    nomad.fail = None
    clock.now += 30
    svc.run_cycle()
    ex.run_all()
    assert not svc.outage.down


def test_freed_capacity_wakes_the_cycle_past_the_coalescing_gap(clock: Clock, ex: ManualExecutor) -> None:
    """Submissions are coalesced; an ending allocation is a handoff and must not wait for the gap."""
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    assert not svc._wake_now.is_set()  # a submission waits for the gap
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=11))
    assert not svc._wake_now.is_set()
    svc.on_alloc(alloc(job, "complete", index=12))
    assert svc._wake_now.is_set()


def test_placement_events_before_the_register_reply_are_applied_once(clock: Clock, ex: ManualExecutor) -> None:
    """Nomad usually answers a register before its plan places anything; the events may also come first
    (a fast scheduler, a slow reply). Either order ends in the same state."""
    nomad, store = FakeNomad(), SqliteStore()
    svc = started(store, nomad, clock, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    job = store.get(a.id).nomad_job_id
    nomad.during_submit = lambda: svc.on_alloc(alloc(job, "running", index=11))
    ex.run_all()
    e = store.get(a.id)
    assert e.state is EntryState.RUNNING and e.registered_at is not None and nomad.registers() == [job]
    svc.on_alloc(alloc(job, "complete", index=12))
    assert store.get(a.id).state is EntryState.COMPLETE and not svc.life.live


def test_a_queued_entry_whose_stored_spec_is_no_longer_valid_fails_and_start_up_goes_on(
        clock: Clock, ex: ManualExecutor) -> None:
    """docs/reliability.md: a stored spec that a newer validator rejects fails its queued entry with the reason
    instead of stopping start-up (the move queued -> failed must be one the store's table allows)."""
    store = SqliteStore()
    (bad,) = store.add([QueueEntry(id="", name="old", team="t", priority=50, spec={"name": "old", "groups": "x"},
                                   submitted_at=clock.now)])
    svc = started(store, FakeNomad(), clock, ex)
    (good,) = svc.submit(spec("a"))
    stored = store.get(bad.id)
    assert stored.state is EntryState.FAILED and stored.reason.startswith("stored spec is no longer valid")
    assert bad.id not in svc.life.entries and good.id in svc.life.waiting
