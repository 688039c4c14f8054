"""A refused attempt whose stop has not landed: Nomad may still place it (its blocked evaluation is
unblocked when capacity frees, nomad/blocked_evals.go v2.0.5), so the entry's next attempt waits until
Nomad confirmed the stop and every allocation of the refused job is terminal, across a kill -9 too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.nomad.client import NomadUnavailable
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.nomad.evaldecode import EvalInfo
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore

NODES = [gpu_node("n1", 1), gpu_node("n2", 1)]
NO_LEADER = NomadUnavailable("HTTP 500: No cluster leader")


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _refused(path: str, clock: Clock) -> tuple[FakeNomad, str, str, str]:
    """An entry admitted, refused by Nomad (a blocked evaluation), its stop refused "No cluster leader";
    then the service is killed. Returns Nomad, the entry, the refused job and its node."""
    nomad, ex = FakeNomad(), ManualExecutor()
    store = SqliteStore(path)
    svc = service(store, nomad, clock, ex)
    svc.on_resync(NODES, [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    first = store.get(a.id)
    svc.on_eval(EvalInfo("e1", first.nomad_job_id, "default", "complete", "job-register",
                         "group main: 1 node(s) evaluated; devices: no devices match request exhausted (1)"))
    assert store.get(a.id).state is EntryState.QUEUED
    nomad.fail = NO_LEADER
    ex.run_all()
    assert not nomad.jobs[first.nomad_job_id].stopped
    store.close()  # kill -9
    nomad.fail = None
    return nomad, a.id, first.nomad_job_id, str(first.placements[0]["node"])


def _restart(path: str, nomad: FakeNomad, clock: Clock,
             allocs: list[AllocInfo]) -> tuple[SchedulerService, ManualExecutor]:
    ex = ManualExecutor()
    svc = service(SqliteStore(path), nomad, clock, ex)
    svc.on_resync(NODES, allocs)
    return svc, ex


def _admitted_only_once_the_refused_job_ends(svc: SchedulerService, ex: ManualExecutor, entry: str, job: str,
                                             node: str) -> None:
    """Stopped, the refused job's allocation still runs: the next attempt stays queued until it ends."""
    svc.run_cycle()
    ex.run_all()
    assert svc.store.get(entry).state is EntryState.QUEUED
    svc.on_alloc(alloc(job, "complete", node=node, devices=(f"GPU-{node}-0",), desired="stop", index=99))
    svc.run_cycle()
    ex.run_all()
    assert svc.store.get(entry).state is EntryState.ADMITTED


def test_after_a_restart_the_next_attempt_waits_for_the_refused_job_nomad_placed_meanwhile(
        tmp_path: Path, clock: Clock) -> None:
    path = str(tmp_path / "q.db")
    nomad, entry, job, node = _refused(path, clock)
    # while the service was down, capacity freed and Nomad placed the refused job after all
    placed = alloc(job, "running", node=node, devices=(f"GPU-{node}-0",))
    svc, ex = _restart(path, nomad, clock, [placed])
    svc.run_cycle()
    assert svc.store.get(entry).state is EntryState.QUEUED  # not beside the refused job's allocation
    ex.run_all()  # the stop lands; its allocation is not terminal yet
    assert nomad.jobs[job].stopped
    _admitted_only_once_the_refused_job_ends(svc, ex, entry, job, node)
    assert [j for j in nomad.registers() if j != job]


def test_after_a_restart_the_next_attempt_waits_for_the_refused_jobs_stop(tmp_path: Path, clock: Clock) -> None:
    path = str(tmp_path / "q.db")
    nomad, entry, job, node = _refused(path, clock)
    svc, ex = _restart(path, nomad, clock, [])  # still blocked in Nomad: it may be placed any time
    nomad.fail = NO_LEADER
    svc.run_cycle()
    ex.run_all()
    svc.run_cycle()
    assert svc.store.get(entry).state is EntryState.QUEUED and nomad.registers() == [job]
    nomad.fail = None
    clock.now += 60  # the stop's retry is due
    svc.run_cycle()
    ex.run_all()
    assert nomad.jobs[job].stopped
    # the fake lists an allocation of the stopped job, not yet terminal: the next attempt waits for its end
    _admitted_only_once_the_refused_job_ends(svc, ex, entry, job, node)


def test_a_register_resumed_after_a_restart_is_withheld_when_a_pinned_gpu_turned_unhealthy(
        tmp_path: Path, clock: Clock) -> None:
    """Nomad would block such a job and place it the moment the GPU heals, perhaps while its stop cannot land
    (an election): it is queued again instead, no retry used (the node's healthy devices stay candidates), and
    the job its killed process may have sent is stopped before the next attempt goes."""
    path = str(tmp_path / "q.db")
    nomad, ex = FakeNomad(), ManualExecutor()
    store = SqliteStore(path)
    svc = service(store, nomad, clock, ex)
    svc.on_resync(NODES, [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()  # admitted; killed before the pool sent its register
    first = store.get(a.id)
    node = str(first.placements[0]["node"])
    store.close()
    sick = [replace(n, gpus=tuple(replace(g, healthy=False, health="XID 79") for g in n.gpus))
            if n.id == node else n for n in NODES]
    ex2 = ManualExecutor()
    svc2 = service(SqliteStore(path), nomad, clock, ex2)
    svc2.on_resync(sick, [])
    ex2.run_all()
    assert first.nomad_job_id not in nomad.registers()
    e = svc2.store.get(a.id)
    assert e.state is EntryState.QUEUED and e.refusals == 1 and e.retries_used == 0 and "XID 79" in e.reason
    assert svc2.life.entries[a.id].avoid == {}, "the node's healthy devices stay candidates"
    svc2.run_cycle()
    ex2.run_all()
    svc2.run_cycle()
    ex2.run_all()
    again = svc2.store.get(a.id)
    assert again.state is EntryState.ADMITTED and again.placements[0]["node"] != node


def test_after_a_restart_a_cut_off_attempts_gpu_whose_stop_was_pending_is_freed_by_the_bound(
        tmp_path: Path, clock: Clock) -> None:
    """The ended attempt drains again after the restart and its allocation, cut off, is booked by itself: the
    bound (life/cutoff.py) frees both, so the GPU is not held for ever when the client never reports."""
    path, nomad, ex = str(tmp_path / "q.db"), FakeNomad(), ManualExecutor()
    store = SqliteStore(path)
    one = [gpu_node("n1", 1)]
    svc = service(store, nomad, clock, ex)
    svc.on_resync(one, [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=10))
    svc.on_alloc(alloc(job, "unknown", index=11))  # its node cut off: queued again, its stop sent
    nomad.fail = NO_LEADER
    ex.run_all()
    store.close()  # kill -9 with the stop still to send
    nomad.fail = None
    ex2 = ManualExecutor()
    svc2 = service(SqliteStore(path), nomad, clock, ex2)
    svc2.on_resync(one, [alloc(job, "unknown", index=11)])
    ex2.run_all()
    assert nomad.jobs[job].stopped
    svc2.run_cycle()
    assert svc2.store.get(a.id).state is EntryState.QUEUED, "the cut-off task may still run"
    clock.now += 101  # past the bound: stop_on_client_after 60 s + max_kill_timeout 30 s + 10 s
    svc2.run_cycle()
    ex2.run_all()
    svc2.run_cycle()
    assert svc2.store.get(a.id).state is EntryState.ADMITTED


def test_a_refusal_for_a_pinned_gpu_that_turned_unhealthy_keeps_the_nodes_healthy_gpus_candidates(
        clock: Clock) -> None:
    """The GPU failed between the admission and Nomad's placement: Nomad refuses ("devices: no devices match
    request exhausted"), and the node's other GPUs are fine. Avoiding the whole node for `refusal_avoid_s`
    (300 s) would keep the entry from the node's healthy GPUs (a chaos run with one shared GPU never settled);
    the ledger no longer offers the sick one anyway."""
    nomad, ex = FakeNomad(), ManualExecutor()
    store = SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 2)], [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    first = store.get(a.id)
    pinned = first.placements[0]["instance_ids"][0]
    (n1,) = [gpu_node("n1", 2)]
    svc.on_node(replace(n1, gpus=tuple(replace(g, healthy=False, health="XID 79") if g.id == pinned else g
                                       for g in n1.gpus)))
    svc.on_eval(EvalInfo("e1", first.nomad_job_id, "default", "complete", "job-register",
                         "group main: 1 node(s) evaluated; devices: no devices match request exhausted (1)"))
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and e.refusals == 1 and e.retries_used == 0
    assert svc.life.entries[a.id].avoid == {}, "the node's healthy GPU stays a candidate"
    ex.run_all()
    svc.on_alloc(alloc(first.nomad_job_id, "complete", node="n1", devices=(pinned,), desired="stop", index=99))
    svc.run_cycle()
    ex.run_all()
    again = store.get(a.id)
    assert again.state is EntryState.ADMITTED and again.placements[0]["instance_ids"][0] != pinned
