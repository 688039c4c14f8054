"""A placement refusal (a blocked evaluation) that arrives while the register is still in flight is
applied too: Nomad processes the evaluation while its reply travels, so either order happens."""

from __future__ import annotations

from fakes import Clock, FakeNomad, ManualExecutor, gpu_node, service, spec

from nomad_gpu.nomad.evaldecode import EvalInfo
from nomad_gpu.store import EntryState, SqliteStore


def test_a_refusal_before_the_register_reply_requeues_and_stops_after_the_reply() -> None:
    clock, ex, nomad, store = Clock(), ManualExecutor(), FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 1), gpu_node("n2", 1)], [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    job = store.get(a.id).nomad_job_id
    nomad.during_submit = lambda: svc.on_eval(EvalInfo("e1", job, "default", "blocked", "queued-allocs",
                                                       "group main: 1 node(s) evaluated; missing drivers (1)"))
    ex.run_all()
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and e.refusals == 1 and e.retries_used == 0
    assert "missing drivers" in e.reason
    assert nomad.calls.index(("register", job)) < nomad.calls.index(("stop", job))
    assert nomad.jobs[job].stopped
