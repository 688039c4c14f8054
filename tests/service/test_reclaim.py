"""Idle reclaim in the service, replayed with a fake Nomad, a manual executor and a clock: a session idle
past its window is warned, then stopped for a waiting job (which gets its GPU once Nomad reports the
stopped allocation terminal), only warned while nobody waits, postponed by `keep`, never stopped while
active; what Nomad was told is checked, not only what the service believes."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.domain.errors import InvalidRequest, StateConflict
from nomad_gpu.domain.idle import IdleAction, IdlePolicy
from nomad_gpu.service.accounting.idleaccounts import IdleAccounts
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.config.idleconfig import idle_from_classes
from nomad_gpu.service.loops.reclaim import IdleReclaim
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore

MIN = 60.0


class Meta:
    """The store's meta as the reclaim sees it: one value per key."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}


def session(name: str, cls: str = "interactive") -> dict[str, Any]:
    return {**spec(name), "class": cls}


def setup(policies: Any = None) -> tuple[SchedulerService, FakeNomad, Clock, ManualExecutor, IdleReclaim, Meta]:
    clock, ex, nomad, store, meta = Clock(), ManualExecutor(), FakeNomad(), SqliteStore(), Meta()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 1)], [])
    accounts = IdleAccounts(lambda: meta.values.get("a"), lambda v: meta.values.__setitem__("a", v), 86400.0)
    idle = IdleReclaim(svc, policies or idle_from_classes(None), accounts, Metrics(),
                       load=lambda: meta.values.get("k"), save=lambda v: meta.values.__setitem__("k", v))
    return svc, nomad, clock, ex, idle, meta


def running(svc: SchedulerService, ex: ManualExecutor, name: str, cls: str = "interactive") -> str:
    (e,) = svc.submit(session(name, cls))
    svc.run_cycle()
    ex.run_all()
    svc.on_alloc(alloc(svc.store.get(e.id).nomad_job_id, "running"))
    assert svc.store.get(e.id).state is EntryState.RUNNING
    return e.id


def waiting(svc: SchedulerService, name: str = "w") -> str:
    (w,) = svc.submit(spec(name))
    svc.run_cycle()
    assert svc.store.get(w.id).state is EntryState.QUEUED
    return w.id


def test_warned_then_stopped_for_a_waiting_job_which_then_runs_on_its_gpu() -> None:
    svc, nomad, clock, ex, idle, _ = setup()
    s = running(svc, ex, "s")
    since = clock.now
    clock.now += 25 * MIN
    assert idle.review(clock.now, {s: since}) == []
    assert idle.fields(s)["idle_note"] == "idle 25 min: will be stopped in 5 min if a job is waiting"
    clock.now += 10 * MIN
    assert idle.review(clock.now, {s: since}) == []  # nobody waits: only warned
    assert idle.fields(s)["idle_note"] == "idle 35 min: will be stopped when a job is waiting"
    w = waiting(svc)
    assert idle.review(clock.now, {s: since}) == [s]
    stopped = svc.store.get(s)
    assert (stopped.state, stopped.reason) == (EntryState.RECLAIMED, f"idle 35 min: stopped for {w}")
    ex.run_all()
    assert ("stop", stopped.nomad_job_id) in nomad.calls
    svc.run_cycle()
    assert svc.store.get(w).state is EntryState.QUEUED, "the GPU stays booked while Nomad stops the session"
    assert idle.review(clock.now, {}) == []
    svc.on_alloc(alloc(stopped.nomad_job_id, "complete", desired="stop", index=20))
    svc.run_cycle()
    placed = svc.store.get(w)
    assert placed.state is EntryState.ADMITTED and placed.placements[0]["instance_ids"] == ["GPU-n1-0"]


def test_an_active_session_is_never_stopped_and_a_training_job_never_judged() -> None:
    svc, _, clock, ex, idle, _ = setup()
    s = running(svc, ex, "s")
    waiting(svc)
    clock.now += 10 * 3600
    assert idle.review(clock.now, {s: None}) == []
    assert svc.store.get(s).state is EntryState.RUNNING and idle.fields(s) == {}


def test_keep_postpones_it_up_to_max_keep_and_bad_keeps_change_nothing() -> None:
    svc, _, clock, ex, idle, meta = setup()
    s = running(svc, ex, "s")
    since = clock.now
    waiting(svc)
    clock.now += 29 * MIN
    idle.review(clock.now, {s: since})
    with pytest.raises(InvalidRequest, match="past class interactive's max_keep of 4 h"):
        idle.keep(svc.store.get(s), 5 * 3600, clock.now)
    assert idle.keeps == {} and "k" not in meta.values
    until = idle.keep(svc.store.get(s), 2 * 3600, clock.now)
    assert until == clock.now + 2 * 3600 and idle.fields(s)["kept_until"] == until
    clock.now += 60 * MIN
    assert idle.review(clock.now, {s: since}) == []
    assert idle.fields(s)["idle_note"] == "idle 89 min: kept 60 min more, then will be stopped if a job is waiting"
    clock.now += 61 * MIN
    assert idle.review(clock.now, {s: since}) == [s]


def test_keep_of_a_job_that_is_never_reclaimed_or_not_running_is_refused() -> None:
    svc, _, _, ex, idle, _ = setup()
    t = running(svc, ex, "t", cls="training")
    with pytest.raises(StateConflict, match="class training is never taken back"):
        idle.keep(svc.store.get(t), 3600, 0.0)
    svc.cancel(t)
    with pytest.raises(StateConflict, match="only a running job can be kept"):
        idle.keep(svc.store.get(t), 3600, 0.0)


def test_requeue_queues_it_again_and_nobody_is_stopped_twice_for_one_job() -> None:
    policy = IdlePolicy(after_s=30 * MIN, action=IdleAction.REQUEUE)
    svc, _, clock, ex, idle, _ = setup({**idle_from_classes(None), **{k: policy for k in idle_from_classes(None)}})
    svc.on_resync([gpu_node("n1", 2)], [])
    s1, s2 = running(svc, ex, "s1", "exploratory"), running(svc, ex, "s2", "exploratory")
    waiting(svc)
    since = clock.now
    clock.now += 31 * MIN
    assert idle.review(clock.now, {s1: since, s2: since}) == [s1]  # one GPU frees enough for the one job
    assert svc.store.get(s1).state is EntryState.QUEUED and svc.store.get(s1).reason.startswith("idle 31 min: re-q")
    assert idle.review(clock.now + 60, {s2: since}) == [], "its GPU still drains: no second victim for it"


def test_idle_gpu_hours_are_booked_per_team_and_class() -> None:
    svc, _, clock, ex, idle, _ = setup()
    s = running(svc, ex, "s")
    since = clock.now
    for _ in range(4):
        clock.now += 15 * MIN
        idle.review(clock.now, {s: since})
    totals = idle.accounts.totals("class", 0.0, clock.now)
    assert totals["interactive"].idle_gpu_hours == pytest.approx(1.0)
    assert idle.accounts.totals("team", 0.0, clock.now)["t"].idle_gpu_hours == pytest.approx(1.0)


def test_the_keep_route_and_the_usage_report() -> None:
    """`POST /v1/jobs/{id}/keep`: its owner only, a duration within max_keep; bad input is a 4xx JSON and
    changes nothing. `GET /v1/usage` rows carry idle and returned GPU-hours and reclaims."""
    from starlette.testclient import TestClient

    from nomad_gpu.service.config.settings import AccessSettings
    from nomad_gpu.service.http.api import create_app

    svc, _, clock, ex, idle, meta = setup()
    s = running(svc, ex, "s")  # team t
    app = TestClient(create_app(svc, "admin-token", AccessSettings(tokens={"t-token": "t", "u-token": "u"}),
                                idle=idle))

    def keep(body: Any, token: str = "t-token") -> tuple[int, dict[str, Any]]:
        r = app.post(f"/v1/jobs/{s}/keep", json=body, headers={"Authorization": f"Bearer {token}"})
        return r.status_code, r.json()

    for body, token, status, words in [({"for": "2h"}, "u-token", 404, "no queue entry"),
                                       ({"for": "5h"}, "t-token", 400, "past class interactive's max_keep"),
                                       ({"for": "-1h"}, "t-token", 400, "is not a duration"),
                                       ({"for": "soon"}, "t-token", 400, "is not a duration"),
                                       ({"until": "2h"}, "t-token", 400, 'send {"for": "2h"}')]:
        code, answer = keep(body, token)
        assert (code, "\n" in answer["error"]) == (status, False) and words in answer["error"], (body, answer)
    assert idle.keeps == {} and "k" not in meta.values
    code, answer = keep({"for": "90m"})
    assert code == 200 and answer == {"id": s, "kept_until": clock.now + 90 * MIN}
    code, answer = keep(None)
    assert code == 200 and answer["kept_until"] == clock.now + 3600  # the default: one hour

    since = clock.now
    clock.now += 90 * MIN
    waiting(svc)
    assert idle.review(clock.now, {s: since}) == [s]
    clock.now += 30 * MIN
    rows = app.get("/v1/usage?by=class&since=1d", headers={"Authorization": "Bearer admin-token"}).json()["rows"]
    (row,) = [r for r in rows if r["key"] == "interactive"]
    assert row["idle_gpu_hours"] == pytest.approx(1.5) and row["reclaims"] == 1
    assert row["reclaimed_gpu_hours"] == pytest.approx(0.5)


def test_after_a_restart_nobody_else_is_stopped_while_a_reclaimed_job_drains() -> None:
    """A new review (a restarted service: it has forgotten whom the draining job was stopped for) takes
    nothing back until that job's GPU is free: else a second session would be stopped for the same job."""
    svc, _, clock, ex, idle, meta = setup()
    svc.on_resync([gpu_node("n1", 2)], [])
    s1, s2 = running(svc, ex, "s1"), running(svc, ex, "s2")
    waiting(svc)
    since = clock.now
    clock.now += 31 * MIN
    assert idle.review(clock.now, {s1: since, s2: since}) == [s1]
    accounts = IdleAccounts(lambda: meta.values.get("a"), lambda v: meta.values.__setitem__("a", v), 86400.0)
    again = IdleReclaim(svc, idle.policies, accounts, Metrics(), load=lambda: meta.values.get("k"),
                        save=lambda v: meta.values.__setitem__("k", v))
    assert again.review(clock.now + 30, {s2: since}) == []
    assert svc.store.get(s2).state is EntryState.RUNNING


def test_the_grace_of_a_reclaimed_job_is_its_checkpoint_grace_else_nomads_default() -> None:
    from nomad_gpu.service.loops.reclaim import reclaim_grace_s

    assert reclaim_grace_s({}) == 5.0
    assert reclaim_grace_s({"checkpoint": {"grace": "120s"}}) == 120.0
    assert reclaim_grace_s({"checkpoint": {"signal": "SIGUSR1"}}) == reclaim_grace_s({"checkpoint": {}})
