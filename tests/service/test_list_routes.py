"""GET /v1/sweeps (the caller's team's sweeps) and GET /v1/usage (GPU accounting over a window)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, gpu_node, service
from starlette.testclient import TestClient

from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

ADMIN, VISION = "admin-t", "vision-t"
ACCESS = AccessSettings(tokens={VISION: "vision"})


def sweep(name: str, team: str, n: int = 2) -> dict[str, object]:
    return {"kind": "sweep", "name": name, "team": team, "task": {"image": "b"}, "gpu": {"count": 1},
            "sweep": {"parameters": {"lr": [0.1 * (i + 1) for i in range(n)]}}}


def job(name: str, team: str, gpus: int = 1) -> dict[str, object]:
    return {"name": name, "team": team, "task": {"image": "b"}, "gpu": {"count": gpus}}


@pytest.fixture
def svc() -> tuple[SchedulerService, Clock, ManualExecutor]:
    clock, ex = Clock(), ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), clock, ex)
    s.on_resync([gpu_node("n1", 8)], [])
    return s, clock, ex


def get(s: SchedulerService, path: str, token: str = ADMIN) -> tuple[int, dict[str, Any]]:
    r = TestClient(create_app(s, ADMIN, ACCESS)).get(path, headers={"Authorization": f"Bearer {token}"})
    return r.status_code, r.json()


def test_sweeps_lists_each_sweep_with_counts_newest_first(svc: tuple[SchedulerService, Clock, ManualExecutor]) -> None:
    s, clock, _ = svc
    first = s.submit(sweep("lr", "vision", 3))[0].sweep
    clock.now += 10
    second = s.submit(sweep("bs", "nlp", 2))[0].sweep
    s.submit(job("plain", "vision"))
    code, body = get(s, "/v1/sweeps")
    assert code == 200
    assert [(r["id"], r["name"], r["team"], r["trials"], r["states"]) for r in body["sweeps"]] == [
        (second, "bs", "nlp", 2, {"queued": 2}), (first, "lr", "vision", 3, {"queued": 3})]


def test_a_team_token_sees_its_team_s_sweeps_only(svc: tuple[SchedulerService, Clock, ManualExecutor]) -> None:
    s, _, _ = svc
    mine = s.submit(sweep("lr", "vision"))[0].sweep
    s.submit(sweep("bs", "nlp"))
    code, body = get(s, "/v1/sweeps", VISION)
    assert code == 200 and [r["id"] for r in body["sweeps"]] == [mine]


def test_sweeps_state_filter(svc: tuple[SchedulerService, Clock, ManualExecutor]) -> None:
    s, _, _ = svc
    live = s.submit(sweep("lr", "vision"))[0].sweep
    done = s.submit(sweep("bs", "vision"))[0].sweep
    s.cancel_sweep(done or "")
    assert [r["id"] for r in get(s, "/v1/sweeps?state=queued")[1]["sweeps"]] == [live]
    assert [r["id"] for r in get(s, "/v1/sweeps?state=cancelled")[1]["sweeps"]] == [done]
    code, body = get(s, "/v1/sweeps?state=finished")
    assert code == 400 and "unknown state 'finished'" in str(body["error"])


def test_usage_counts_gpu_hours_waits_and_failures(svc: tuple[SchedulerService, Clock, ManualExecutor]) -> None:
    from fakes import alloc

    s, clock, ex = svc
    two = s.submit(job("two", "vision", gpus=2))[0]
    clock.now += 60
    one = s.submit(job("one", "nlp", gpus=1))[0]
    s.run_cycle()
    ex.run_all()
    for e in (two, one):
        entry = s.store.get(e.id)
        s.on_alloc(alloc(entry.nomad_job_id, "running", devices=tuple(p["instance_ids"][0] for p in entry.placements)))
    clock.now += 3600
    s.on_alloc(alloc(s.store.get(two.id).nomad_job_id, "complete"))
    s.on_alloc(alloc(s.store.get(one.id).nomad_job_id, "failed"))
    code, body = get(s, "/v1/usage?since=1d&by=team")
    assert code == 200, body
    rows = {r["key"]: r for r in body["rows"]}
    assert rows["vision"]["gpu_hours"] == pytest.approx(2.0, rel=1e-3)  # 2 GPUs held 1 h from admission
    assert rows["nlp"]["gpu_hours"] == pytest.approx(1.0, rel=1e-3)
    assert rows["vision"]["mean_wait_s"] == pytest.approx(60.0) and rows["nlp"]["mean_wait_s"] == pytest.approx(0.0)
    assert rows["nlp"]["failures"] == 1 and rows["vision"]["failures"] == 0
    assert rows["vision"]["jobs"] == rows["vision"]["attempts"] == 1
    code, body = get(s, "/v1/usage?since=1d", VISION)
    assert [r["key"] for r in body["rows"]] == ["vision"]
    code, body = get(s, "/v1/usage?by=model")
    assert [r["key"] for r in body["rows"]] == ["A100"]


@pytest.mark.parametrize(("query", "words"), [("since=yesterday", "since must be like 30d"), ("by=gpu", "by must be")])
def test_usage_refuses_bad_parameters(svc: tuple[SchedulerService, Clock, ManualExecutor], query: str,
                                      words: str) -> None:
    code, body = get(svc[0], f"/v1/usage?{query}")
    assert code == 400 and words in str(body["error"])


def test_jobs_filter_by_team_and_name_in_the_service(svc: tuple[SchedulerService, Clock, ManualExecutor]) -> None:
    s, _, _ = svc
    for name, team in (("resnet-a", "vision"), ("bert", "nlp"), ("resnet-b", "nlp"), ("resnet-c", "vision")):
        s.submit(job(name, team))
    code, body = get(s, "/v1/jobs?team=vision")
    assert code == 200 and [e["name"] for e in body["entries"]] == ["resnet-a", "resnet-c"]
    code, body = get(s, "/v1/jobs?name=resnet-*&team=nlp")
    assert code == 200 and [e["name"] for e in body["entries"]] == ["resnet-b"]
    # a glob as the CLI writes it ('[!x]' is fnmatch's negation)
    code, body = get(s, "/v1/jobs?name=resnet-[!a]")
    assert code == 200 and [e["name"] for e in body["entries"]] == ["resnet-b", "resnet-c"]
    code, body = get(s, "/v1/jobs?name=resnet-[^ab]")  # SQLite's way negates too
    assert code == 200 and [e["name"] for e in body["entries"]] == ["resnet-c"]


def test_filters_apply_before_a_page_is_cut(svc: tuple[SchedulerService, Clock, ManualExecutor]) -> None:
    s, _, _ = svc
    for i in range(6):
        s.submit(job(f"{'keep' if i % 2 else 'skip'}-{i}", "vision"))
    code, body = get(s, "/v1/jobs?name=keep-*&limit=2&offset=1")
    assert code == 200 and [e["name"] for e in body["entries"]] == ["keep-3", "keep-5"]


def test_a_team_filter_never_widens_a_team_token(svc: tuple[SchedulerService, Clock, ManualExecutor]) -> None:
    s, _, _ = svc
    s.submit(job("mine", "vision"))
    s.submit(job("theirs", "nlp"))
    code, body = get(s, "/v1/jobs?team=nlp", VISION)
    assert code == 200 and body["entries"] == []
    code, body = get(s, "/v1/jobs?team=vision", VISION)
    assert code == 200 and [e["name"] for e in body["entries"]] == ["mine"]


@pytest.mark.parametrize("query", ["name=" + "x" * 300, "team=" + "t" * 300, "name=a%00b"])
def test_bad_filters_are_refused(svc: tuple[SchedulerService, Clock, ManualExecutor], query: str) -> None:
    s, _, _ = svc
    code, body = get(s, f"/v1/jobs?{query}")
    assert code == 400 and "error" in body
