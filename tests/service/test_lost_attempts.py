"""A lost attempt: Nomad's servers lost its node, but its task may still run there (docs/partitions.md).

The entry is queued again without using a retry (its reason says why), and the attempt's GPUs stay booked
until its client reports the task ended (on reconnect) or until `stop_on_client_after` + the capped
kill_timeout + a margin have passed (service/life/cutoff.py): never handed to the next job while the old
task may still hold them. Replayed with a fake Nomad, a manual executor and a fake clock.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.service.config.settings import scheduling_from_mapping
from nomad_gpu.service.life.cutoff import bound_s
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore

N1 = gpu_node("n1", 1)  # one GPU: the next job can only land where the lost task may still run


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ex() -> ManualExecutor:
    return ManualExecutor()


def _running(store: SqliteStore, nomad: FakeNomad, clock: Clock, ex: ManualExecutor,
             ) -> tuple[SchedulerService, str, str, str]:
    svc = service(store, nomad, clock, ex)
    svc.on_resync([N1], [])
    (a,) = svc.submit(spec("a"))  # no retry left to use
    (b,) = svc.submit(spec("b"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=10))
    assert store.get(a.id).state is EntryState.RUNNING
    return svc, a.id, b.id, job


@pytest.mark.parametrize("status", ["lost", "unknown"])
def test_a_lost_attempt_is_queued_again_and_keeps_its_gpu_until_the_client_reports(
        status: str, clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc, a, b, job = _running(store, nomad, clock, ex)
    svc.on_alloc(alloc(job, status, desired="stop" if status == "lost" else "run", index=11))
    e = store.get(a)
    assert e.state is EntryState.QUEUED and e.retries_used == 0 and e.refusals == 1
    assert "cut off from Nomad" in e.reason and "no retry used" in e.reason
    ex.run_all()
    assert nomad.jobs[job].stopped, "its job is stopped (the client kills the task when it hears it)"
    clock.now += 30.0
    svc.run_cycle()
    ex.run_all()
    assert {store.get(x).state for x in (a, b)} == {EntryState.QUEUED}, "the GPU may still be in use"
    # the node reconnects: the client reports the task it killed (`Killed`, desired stop)
    svc.on_alloc(alloc(job, "complete", desired="stop", index=12))
    svc.run_cycle()
    ex.run_all()
    assert [x for x in (a, b) if store.get(x).state is EntryState.ADMITTED], "free once the task is gone"


def test_the_bound_frees_a_cut_off_attempts_gpu(clock: Clock, ex: ManualExecutor) -> None:
    nomad, store = FakeNomad(), SqliteStore()
    svc, a, b, job = _running(store, nomad, clock, ex)
    svc.on_alloc(alloc(job, "unknown", index=11))
    ex.run_all()
    bound = bound_s(60.0)
    assert bound == 100.0  # stop_on_client_after 60 s (the default) + max_kill_timeout 30 s + 10 s
    clock.now += bound - 1
    svc.run_cycle()
    ex.run_all()
    assert {store.get(x).state for x in (a, b)} == {EntryState.QUEUED}
    clock.now += 1
    svc.run_cycle()
    ex.run_all()
    assert [x for x in (a, b) if store.get(x).state is EntryState.ADMITTED]


def test_the_next_attempt_waits_until_the_cut_off_task_is_surely_stopped(clock: Clock, ex: ManualExecutor) -> None:
    """Never two runs of one entry at once: a free GPU elsewhere does not start it while the old task may run."""
    nomad, store = FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([N1, gpu_node("n2", 1)], [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", node=store.get(a.id).placements[0]["node"], index=10))
    svc.on_alloc(alloc(job, "unknown", node=store.get(a.id).placements[0]["node"], index=11))
    ex.run_all()
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and "surely stopped" in e.reason
    clock.now += 30.0
    svc.run_cycle()
    ex.run_all()
    assert store.get(a.id).state is EntryState.QUEUED, "the other node's GPU is free, but the old task may run"
    svc.on_alloc(alloc(job, "complete", desired="stop", index=12))  # the client's report on reconnect
    svc.run_cycle()
    ex.run_all()
    assert store.get(a.id).state is EntryState.ADMITTED


def test_a_task_killed_by_its_own_client_is_no_success(clock: Clock, ex: ManualExecutor) -> None:
    """Missed the partition (the service was down): the late report says `complete`, desired `run`, last
    event `Killed` (client/heartbeatstop.go); the entry does not complete."""
    nomad, store = FakeNomad(), SqliteStore()
    svc, a, _, job = _running(store, nomad, clock, ex)
    svc.on_alloc(replace(alloc(job, "complete", index=11), killed=True))
    assert store.get(a).state is not EntryState.COMPLETE


def _restarted(tmp_path: Path, clock: Clock, ex: ManualExecutor, end: AllocInfo) -> tuple[SchedulerService, str, str]:
    """A service killed while its attempt ran; its node is cut off and the attempt ends while it is down; the
    new process reads Nomad's allocations and sees only the end state."""
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    svc, a, b, job = _running(SqliteStore(path), nomad, clock, ex)
    svc.stop()
    svc2 = service(SqliteStore(path), nomad, clock, ManualExecutor())
    svc2.on_resync([N1], [replace(end, job_id=job, id=f"a-{job}")])
    return svc2, a, b


def test_after_a_restart_a_task_its_own_client_stopped_is_queued_again_without_a_retry(
        tmp_path: Path, clock: Clock, ex: ManualExecutor) -> None:
    """`complete`, desired `run`, its task `Killed`: only its own client stops a task so, cut off past
    `stop_on_client_after` (client/heartbeatstop.go, v2.0.5). The same as seeing it `unknown` live: queued
    again, no retry used; its client reported the task gone, so the GPU is free at once."""
    end = replace(alloc("j", "complete", index=30), killed=True)
    svc, a, b = _restarted(tmp_path, clock, ex, end)
    e = svc.store.get(a)
    assert e.state is not EntryState.FAILED, e.reason
    assert e.state is EntryState.QUEUED and e.retries_used == 0
    assert "cut off from Nomad (its own client stopped its task" in e.reason and "no retry used" in e.reason
    svc.run_cycle()
    assert [x for x in (a, b) if svc.store.get(x).state is EntryState.ADMITTED], "the task is gone: the GPU is free"


def test_after_a_restart_a_lost_allocation_is_queued_again_without_a_retry(
        tmp_path: Path, clock: Clock, ex: ManualExecutor) -> None:
    """The servers called it lost (`DesiredDescription` "alloc is lost since its node is down",
    scheduler/structs/const.go v2.0.5, scheduler/generic_sched.go v1.10.5), with no replacement; its
    client later reported it `complete`. Its node was cut off: queued again, no retry used."""
    end = replace(alloc("j", "complete", desired="stop", index=30),
                  desired_description="alloc is lost since its node is down")
    svc, a, _ = _restarted(tmp_path, clock, ex, end)
    e = svc.store.get(a)
    assert e.state is not EntryState.FAILED, e.reason
    assert e.state is EntryState.QUEUED and e.retries_used == 0
    assert "cut off from Nomad (Nomad called it lost" in e.reason


@pytest.mark.parametrize("lost_first", [True, False])
def test_after_a_restart_nomads_replacement_of_a_lost_allocation_carries_the_attempt_on(
        lost_first: bool, tmp_path: Path, clock: Clock, ex: ManualExecutor) -> None:
    """A pending allocation on a node marked down is `lost` and replaced in the same job even with
    `replace = false` (that keeps only a running one `unknown`: `classificationRules`,
    scheduler/reconciler/filters.go v2.0.5). Seen after a restart with its replacement, which ran to
    completion meanwhile, the attempt is that replacement's: it completes, and does not run again."""
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    svc, a, _, job = _running(SqliteStore(path), nomad, clock, ex)
    svc.stop()
    lost = replace(alloc(job, "complete", desired="stop", index=30, next_alloc="a-next"),
                   desired_description="alloc is lost since its node is down")
    done = alloc(job, "complete", index=31, alloc_id="a-next")
    store = SqliteStore(path)
    svc2 = service(store, nomad, clock, ManualExecutor())
    svc2.on_resync([N1], [lost, done] if lost_first else [done, lost])
    e = store.get(a)
    assert e.state is EntryState.COMPLETE and e.attempts == 0, e.reason


def test_a_task_killed_by_its_client_after_a_kill_timeout_is_not_mistaken_for_a_cut_off(
        clock: Clock, ex: ManualExecutor) -> None:
    """Killed with desired `stop` and no lost verdict: a stop (ours or an operator's), not a partition."""
    nomad, store = FakeNomad(), SqliteStore()
    svc, a, _, job = _running(store, nomad, clock, ex)
    svc.on_alloc(replace(alloc(job, "complete", desired="stop", index=11), killed=True))
    e = store.get(a)
    assert e.state is EntryState.FAILED and "cut off" not in e.reason


def test_the_setting_is_read_from_the_config_and_rendered() -> None:
    assert scheduling_from_mapping({}).stop_on_client_after_s == 60.0
    assert scheduling_from_mapping({"nomad": {"stop_on_client_after": "2m"}}).stop_on_client_after_s == 120.0
    assert bound_s(scheduling_from_mapping({"nomad": {"stop_on_client_after": 90}}).stop_on_client_after_s) == 130.0
    off = scheduling_from_mapping({"nomad": {"stop_on_client_after": None}})
    assert off.stop_on_client_after_s is None and bound_s(off.stop_on_client_after_s) is None
    for bad in ("soon", 0, "1.5s", True, -5):
        with pytest.raises(InvalidRequest, match="config: nomad: stop_on_client_after: must be a whole number"):
            scheduling_from_mapping({"nomad": {"stop_on_client_after": bad}})


def test_a_reconnected_task_being_killed_still_holds_the_entry_back(clock: Clock, ex: ManualExecutor) -> None:
    """On reconnect the unknown allocation is `running` again (desired stop: its job was stopped) until the
    client's kill ends it: the next attempt waits for that end, not for the reconnect."""
    nomad, store = FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([N1, gpu_node("n2", 1)], [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job, node = store.get(a.id).nomad_job_id, store.get(a.id).placements[0]["node"]
    svc.on_alloc(alloc(job, "running", node=node, index=10))
    svc.on_alloc(alloc(job, "unknown", node=node, index=11))
    ex.run_all()
    svc.on_alloc(alloc(job, "running", node=node, desired="stop", index=12))  # reconnected, being killed
    svc.run_cycle()
    ex.run_all()
    assert store.get(a.id).state is EntryState.QUEUED, "the old task still runs: no second run at once"
    svc.on_alloc(alloc(job, "complete", node=node, desired="stop", index=13))
    svc.run_cycle()
    ex.run_all()
    assert store.get(a.id).state is EntryState.ADMITTED


def test_a_cut_off_job_collected_keeps_its_gpu_until_the_bound(clock: Clock, ex: ManualExecutor) -> None:
    """Nomad may garbage-collect a stopped job whose only allocation is `lost` (terminal) while its task still
    runs cut off: an empty listing then says nothing of that task, so the bound alone frees the GPU."""
    nomad, store = FakeNomad(), SqliteStore()
    svc, a, b, job = _running(store, nomad, clock, ex)
    svc.on_alloc(alloc(job, "lost", desired="stop", index=11))
    ex.run_all()
    nomad.jobs.pop(job, None)  # collected
    svc.on_resync([N1], [])
    svc.run_cycle()
    ex.run_all()
    assert {store.get(x).state for x in (a, b)} == {EntryState.QUEUED}, "the lost task may still hold the GPU"
    clock.now += bound_s(60.0) or 0.0
    svc.run_cycle()
    ex.run_all()
    assert [x for x in (a, b) if store.get(x).state is EntryState.ADMITTED]


def test_after_a_restart_a_lost_allocation_of_an_old_attempt_keeps_its_gpu(tmp_path: Path, clock: Clock,
                                                                            ex: ManualExecutor) -> None:
    """A new process does not know the old attempt drained: Nomad's listing shows its allocation `lost`, whose
    task may still run, so its GPU is booked until the client reports the end (or the bound passes)."""
    nomad, path = FakeNomad(), str(tmp_path / "q.db")
    svc, a, b, job = _running(SqliteStore(path), nomad, clock, ex)
    svc.on_alloc(alloc(job, "lost", desired="stop", index=11))
    ex.run_all()
    svc.stop()
    svc2 = service(SqliteStore(path), nomad, clock, ManualExecutor())
    svc2.on_resync([N1], [alloc(job, "lost", desired="stop", index=11)])
    svc2.run_cycle()
    assert {svc2.store.get(x).state for x in (a, b)} == {EntryState.QUEUED}
    svc2.on_alloc(alloc(job, "complete", desired="stop", index=12))
    svc2.run_cycle()
    assert [x for x in (a, b) if svc2.store.get(x).state is EntryState.ADMITTED]
