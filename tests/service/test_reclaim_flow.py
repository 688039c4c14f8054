"""Reclaim through the service: a lender takes back the quota its cohort's borrower holds (issue 34), with a
fake Nomad, a manual executor and a clock: the victims, the order, and what the borrower keeps."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, spec

from nomad_gpu.nomad.decode import AllocInfo, AllocStatus
from nomad_gpu.service.config.settings import scheduling_from_mapping
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore

TEAMS = {"vision": {"quota_gpu": 2, "cohort": "research"},
         "nlp": {"quota_gpu": 2, "borrow_gpu": 2, "cohort": "research"}}
# class preemption is off: a cohort's reclaim still takes lent quota back (and ignores min_runtime)
SETTINGS = scheduling_from_mapping({"teams": TEAMS, "tick_s": 0.01,
                                    "preemption": {"enabled": False, "min_runtime": "1h", "max_preemptions": 0}})


def job(name: str, team: str, **extra: Any) -> dict[str, Any]:
    return {**spec(name), "team": team, "class": "exploratory", **extra}


def run(svc: SchedulerService, ex: ManualExecutor, e: QueueEntry) -> AllocInfo:
    entry = svc.store.get(e.id)
    assert entry.state is EntryState.ADMITTED, (e.name, entry.state, entry.reason)
    a = alloc(entry.nomad_job_id, node="n1", devices=tuple(str(p["instance_ids"][0]) for p in entry.placements))
    svc.on_alloc(a)
    return a


def test_the_lender_takes_back_its_quota_from_the_newest_borrowed_jobs_only() -> None:
    nomad, store, clock, ex = FakeNomad(), SqliteStore(), Clock(), ManualExecutor()
    svc = SchedulerService(store, nomad, SETTINGS, clock=clock, executor=ex)
    svc.on_resync([gpu_node("n1", 4)], [])
    nlp = []
    allocs = {}
    for k in range(4):  # two within nlp's quota, then two on vision's lent quota
        (e,) = svc.submit(job(f"n{k}", "nlp"))
        svc.run_cycle()
        ex.run_all()
        allocs[e.id] = run(svc, ex, e)
        nlp.append(e)
        clock.now += 10
    assert svc.status()["team_borrowed_gpu"] == {"nlp": 2.0}
    (v,) = svc.submit(job("v", "vision", **{"class": "training"}))
    svc.run_cycle()
    ex.run_all()
    states = {e.name: store.get(e.id).state for e in nlp}
    assert states == {"n0": EntryState.RUNNING, "n1": EntryState.RUNNING, "n2": EntryState.RUNNING,
                      "n3": EntryState.PREEMPTING}, "the newest borrowed job only: vision needs one GPU"
    victim = nlp[3]
    assert store.get(victim.id).reason == f"preempted by {v.id} (reclaim of team vision's lent quota) on n1"
    assert ("stop", store.get(victim.id).nomad_job_id) in nomad.calls
    assert store.get(v.id).state is EntryState.QUEUED
    svc.run_cycle()
    ex.run_all()
    assert store.get(v.id).state is EntryState.QUEUED, "desired stop is not enough: the GPU is still in use"
    svc.on_alloc(replace(allocs[victim.id], client_status=AllocStatus.COMPLETE, desired_status="stop",
                         modify_index=50))
    back = store.get(victim.id)
    assert (back.state, back.retries_used) == (EntryState.QUEUED, 0)
    svc.run_cycle()
    ex.run_all()
    assert store.get(v.id).state is EntryState.ADMITTED
    assert store.get(victim.id).state is EntryState.QUEUED, "nlp is at 3 of its 2 + 2: vision lends nothing now"
    assert svc.status()["team_borrowed_gpu"] == {"nlp": 1.0}
    svc.stop()


def test_without_a_cohort_nothing_is_taken_back() -> None:
    nomad, store, clock, ex = FakeNomad(), SqliteStore(), Clock(), ManualExecutor()
    settings = scheduling_from_mapping({"teams": {"vision": {"quota_gpu": 2}, "nlp": {}}, "tick_s": 0.01})
    svc = SchedulerService(store, nomad, settings, clock=clock, executor=ex)
    svc.on_resync([gpu_node("n1", 2)], [])
    for k in range(2):
        (e,) = svc.submit(job(f"n{k}", "nlp"))
        svc.run_cycle()
        ex.run_all()
        run(svc, ex, e)
    (v,) = svc.submit(job("v", "vision"))
    clock.now += 3600
    svc.run_cycle()
    ex.run_all()
    assert [s.state for s in store.list() if s.team == "nlp"] == [EntryState.RUNNING] * 2
    assert store.get(v.id).state is EntryState.QUEUED
    svc.stop()


def test_under_borrow_requires_any_the_lender_waits_for_borrowed_work_that_is_not_preemptible() -> None:
    nomad, store, clock, ex = FakeNomad(), SqliteStore(), Clock(), ManualExecutor()
    settings = scheduling_from_mapping({"teams": TEAMS, "tick_s": 0.01, "preemption": {"borrow_requires": "any"}})
    svc = SchedulerService(store, nomad, settings, clock=clock, executor=ex)
    svc.on_resync([gpu_node("n1", 4)], [])
    nlp = []
    for k in range(4):  # no class: not preemptible, and under `any` it may borrow all the same
        (e,) = svc.submit({**spec(f"n{k}"), "team": "nlp", "runtime": "20m"})
        svc.run_cycle()
        ex.run_all()
        run(svc, ex, e)
        nlp.append(e)
    (v,) = svc.submit(job("v", "vision"))
    svc.run_cycle()
    ex.run_all()
    assert all(store.get(e.id).state is EntryState.RUNNING for e in nlp), "nothing is taken back"
    reason = store.get(v.id).reason
    assert reason.startswith("waiting for 2 GPU lent to nlp (not preemptible; ends in ~20 min)"), reason
    svc.stop()
