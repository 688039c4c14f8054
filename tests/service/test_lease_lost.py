"""A replica that lost the leader's lease fences every record it follows (`Lifecycle.fence`, the `LeaseLost`
event of the life machine): forgotten here, nothing written to the store, nothing sent to Nomad, even for an
attempt whose register is still queued on the executor or whose stop is due."""

from __future__ import annotations

from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.store import EntryState, SqliteStore


def test_a_fenced_replica_forgets_its_attempts_and_acts_on_none_of_them() -> None:
    nomad, store, clock, ex = FakeNomad(), SqliteStore(), Clock(), ManualExecutor()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 2)], [])
    (running,) = svc.submit(spec("running"))
    svc.run_cycle()
    ex.run_all()
    svc.on_alloc(alloc(store.get(running.id).nomad_job_id, "running", devices=("GPU-n1-0",)))
    (admitted,) = svc.submit(spec("admitted"))
    svc.run_cycle()  # its register waits on the executor
    (queued,) = svc.submit(spec("queued"))  # no GPU left for it
    before = {e.id: (e.state, e.attempts) for e in store.list()}
    calls = len(nomad.calls)
    svc.life.fence()
    assert not svc.life.entries and not svc.life.live and not svc.life.waiting
    ex.run_all()
    clock.now += 3600.0  # every timer and retry due
    svc.run_cycle()
    ex.run_all()
    assert [c for c, _ in nomad.calls[calls:] if c in ("register", "stop")] == []
    assert {e.id: (e.state, e.attempts) for e in store.list()} == before
    assert before[queued.id][0] is EntryState.QUEUED and before[admitted.id][0] is EntryState.ADMITTED
