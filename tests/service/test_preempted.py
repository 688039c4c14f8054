"""An attempt Nomad preempted for a higher-priority job (a system job's device ask: `PreemptForDevice`,
scheduler/feasible/preemption.go v2.0.5; `DesiredStatus: evict` with `PreemptedByAllocation`,
`Plan.AppendPreemptedAlloc` in nomad/structs/structs.go) is queued again without using a retry, saying by
what, and the devices it lost are booked for the preemptor, so nothing of ours is sent onto them."""

from __future__ import annotations

from dataclasses import replace

from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.domain.ids import EntryId
from nomad_gpu.nomad.decode import decode_alloc
from nomad_gpu.store import EntryState, SqliteStore

N1 = gpu_node("n1", 1)


def test_a_preempted_entry_is_requeued_without_a_retry_and_the_gpu_stays_the_preemptors() -> None:
    clock, ex, nomad, store = Clock(), ManualExecutor(), FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([N1], [])
    (a,) = svc.submit(spec("a"))  # no retries: an interruption would fail it
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=10))
    # the system job's plan: its allocation on our GPU, and ours evicted for it
    svc.on_alloc(alloc("node-agent", "pending", alloc_id="sys1", index=11))
    svc.on_alloc(replace(alloc(job, "running", desired="evict", index=11), preempted_by="sys1"))
    assert store.get(a.id).state is EntryState.RUNNING, "nothing to do until the client killed it"
    svc.on_alloc(replace(alloc(job, "complete", desired="evict", index=12), preempted_by="sys1"))
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and e.retries_used == 0 and e.refusals == 1
    assert e.reason == "preempted by allocation sys1 of job node-agent"
    assert EntryId("nomad:sys1") in svc.ledger, "the GPU is booked for the system job now"
    ex.run_all()
    assert nomad.jobs[job].stopped, "its job is stopped: no replacement of it lands later"
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.QUEUED  # its GPU is the system job's
    svc.on_alloc(alloc("node-agent", "complete", alloc_id="sys1", index=13))
    svc.run_cycle()
    assert store.get(a.id).state is EntryState.ADMITTED


def test_preempted_by_is_decoded() -> None:
    raw = {"ID": "x", "JobID": "j", "ClientStatus": "complete", "DesiredStatus": "evict",
           "PreemptedByAllocation": "sys1"}
    a = decode_alloc(raw)
    assert a.preempted_by == "sys1" and a.outcome() == "preempted by allocation sys1"
    assert decode_alloc({**raw, "PreemptedByAllocation": ""}).preempted_by == ""
