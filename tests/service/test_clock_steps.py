"""Timers measure durations on a monotonic clock (issue 26, item 10): a wall-clock step of +2 h killed a
1 h `max_runtime` job 10 s into its run. Within a process, a step is not elapsed time; across a restart,
the stored wall times are used, less a step the stored heartbeat shows happened while the service was down
(the same boot's monotonic clock measures the downtime), and such a step is logged.

Two fake clocks: `wall` (time.time) and `steady` (time.monotonic)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, Node
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.loops import housekeeping
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore
from tests.service.fakes import Clock, FakeNomad, ManualExecutor, alloc, spec

N1 = Node(NodeId("n1"), name="n1", cpu_mhz=64_000, memory_mb=512_000,
          gpus=tuple(Gpu(InstanceId(f"GPU-n1-{k}"), "NVIDIA A100-SXM4-80GB", 81_920) for k in range(2)))


def start(store: SqliteStore, nomad: FakeNomad, wall: Clock, steady: Clock, ex: ManualExecutor,
          allocs: list | None = None) -> SchedulerService:
    svc = SchedulerService(store, nomad, SchedulingSettings(tick_s=0.01), clock=wall, steady=steady, executor=ex)
    svc.on_resync([N1], allocs or [])
    return svc


def running_job(svc: SchedulerService, ex: ManualExecutor) -> tuple[str, str]:
    (a,) = svc.submit({**spec("a"), "max_runtime": "1h"})
    svc.run_cycle()
    ex.run_all()
    job = svc.store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running"))
    return a.id, job


def test_a_forward_step_while_running_is_not_elapsed_time() -> None:
    wall, steady, ex, nomad = Clock(1_000_000.0), Clock(50.0), ManualExecutor(), FakeNomad()
    svc = start(SqliteStore(), nomad, wall, steady, ex)
    entry, _ = running_job(svc, ex)
    wall.now += 7200 + 10  # the wall clock is stepped two hours forward, ten seconds into the run
    steady.now += 10
    svc.run_cycle()
    assert svc.store.get(entry).state is EntryState.RUNNING
    wall.now += 3590
    steady.now += 3590  # an hour of run measured: the limit holds
    svc.run_cycle()
    ex.run_all()
    assert svc.store.get(entry).state is EntryState.FAILED


def test_a_backward_step_does_not_delay_the_limit() -> None:
    wall, steady, ex, nomad = Clock(1_000_000.0), Clock(50.0), ManualExecutor(), FakeNomad()
    svc = start(SqliteStore(), nomad, wall, steady, ex)
    entry, _ = running_job(svc, ex)
    svc.run_cycle()
    wall.now -= 7200  # stepped two hours back
    wall.now += 3601
    steady.now += 3601
    svc.run_cycle()
    ex.run_all()
    assert svc.store.get(entry).state is EntryState.FAILED


def test_a_step_while_the_service_was_down_is_logged_not_obeyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(housekeeping, "boot_id", lambda: "boot-1")
    wall, steady, ex, nomad = Clock(1_000_000.0), Clock(50.0), ManualExecutor(), FakeNomad()
    path = str(tmp_path / "q.db")
    svc = start(SqliteStore(path), nomad, wall, steady, ex)
    entry, job = running_job(svc, ex)
    wall.now += 60
    steady.now += 60
    svc.housekeeping()  # the heartbeat: wall and steady time of the last sign of life
    svc.store.close()
    wall.now += 100 + 7200  # down 100 s, and the wall clock stepped two hours meanwhile
    steady.now += 100
    caplog.set_level(logging.WARNING)
    svc2 = start(SqliteStore(path), nomad, wall, steady, ManualExecutor(), [alloc(job, "running")])
    svc2.run_cycle()
    assert svc2.store.get(entry).state is EntryState.RUNNING
    assert any("7200" in r.getMessage() and "clock" in r.getMessage() for r in caplog.records)
    wall.now += 3440
    steady.now += 3440  # 60 + 100 + 3440 = 3600 s of measured run
    svc2.run_cycle()
    assert svc2.store.get(entry).state is EntryState.FAILED


def test_a_backward_step_does_not_hold_back_a_register_retry() -> None:
    from nomad_gpu.nomad.client import NomadUnavailable

    wall, steady, ex, nomad = Clock(1_000_000.0), Clock(50.0), ManualExecutor(), FakeNomad()
    svc = start(SqliteStore(), nomad, wall, steady, ex)
    nomad.fail = NomadUnavailable("register: cannot reach Nomad (ReadTimeout)")
    svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()  # the register fails: a retry is due after its backoff
    nomad.fail = None
    wall.now -= 7200  # stepped two hours back
    for _ in range(60):  # a minute of cycles, a second apart, on the steady clock
        wall.now += 1
        steady.now += 1
        svc.run_cycle()
        ex.run_all()
    assert len(nomad.registers()) >= 2



def test_a_backward_step_does_not_hold_back_a_stop_retry() -> None:
    from nomad_gpu.nomad.client import NomadUnavailable

    wall, steady, ex, nomad = Clock(1_000_000.0), Clock(50.0), ManualExecutor(), FakeNomad()
    svc = start(SqliteStore(), nomad, wall, steady, ex)
    entry, job = running_job(svc, ex)
    nomad.fail = NomadUnavailable("deregister: cannot reach Nomad (ConnectionError)")
    svc.cancel(entry)
    ex.run_all()  # the stop fails: retried after its backoff
    nomad.fail = None
    wall.now -= 7200  # stepped two hours back
    for _ in range(60):  # a minute of cycles on the steady clock
        wall.now += 1
        steady.now += 1
        svc.run_cycle()
        ex.run_all()
    assert nomad.jobs[job].stopped


def test_a_backward_step_does_not_hold_back_the_outage_probe() -> None:
    """As test_lifecycle's outage that ends by a probe (nothing left to retry), with the wall clock stepped back."""
    wall, steady, ex = Clock(1_000_000.0), Clock(50.0), ManualExecutor()
    nomad = FakeNomad(lose_reply=1)
    svc = start(SqliteStore(), nomad, wall, steady, ex)
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    assert svc.outage.down
    job = svc.store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=11))
    svc.on_alloc(alloc(job, "complete", index=12))
    wall.now -= 7200  # stepped two hours back
    for _ in range(3):
        wall.now += 5
        steady.now += 5
        svc.run_cycle()
        ex.run_all()
    assert ("ping", "") in nomad.calls and not svc.outage.down
