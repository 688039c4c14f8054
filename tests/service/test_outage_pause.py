"""While admissions are paused (service/life/outage.py), the registers of a cycle still waiting in the pool
when another one met "No cluster leader" (a leader election, `getLeaderForRPC` in nomad/rpc.go, v2.0.5)
or a reset are not sent into the outage; they go out, once each, when Nomad answers again. Only the
register that failed retries, on its own backoff, and the probe asks."""

from __future__ import annotations

from collections import Counter

from fakes import Clock, FakeNomad, ManualExecutor, gpu_node, service, spec

from nomad_gpu.nomad.client import NomadUnavailable
from nomad_gpu.store import EntryState, SqliteStore


def test_registers_queued_behind_a_failed_one_wait_for_the_probe() -> None:
    clock, ex = Clock(), ManualExecutor()
    nomad, store = FakeNomad(fail=NomadUnavailable("register: HTTP 500: No cluster leader")), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 8)], [])
    entries = [svc.submit(spec(f"j{i}"))[0] for i in range(8)]
    svc.run_cycle()  # eight admissions: eight registers handed to the pool at once
    ex.run_all()
    assert svc.outage.down and len(nomad.registers()) == 1, nomad.calls
    first = nomad.registers()[0]
    for _ in range(100):  # 1 s of cycles: the probe, and the failed register on its own backoff
        clock.now += 0.01
        svc.run_cycle()
        ex.run_all()
    assert set(nomad.registers()) == {first} and ("ping", "") in nomad.calls, nomad.calls
    assert {store.get(e.id).state for e in entries} == {EntryState.ADMITTED}  # pins kept, nothing failed
    nomad.fail = None  # a leader is elected
    for _ in range(300):
        clock.now += 0.01
        svc.run_cycle()
        ex.run_all()
    assert not svc.outage.down
    sent = Counter(nomad.registers())  # the one that met the election on its backoff (create-only), the rest once
    assert set(sent) == {store.get(e.id).nomad_job_id for e in entries}
    assert all(n == 1 for job, n in sent.items() if job != first), sent
    assert all(store.get(e.id).registered_at is not None for e in entries)
