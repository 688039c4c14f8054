"""What a team borrows and lends, as the API, the status and the metrics show it (issue 34)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor
from starlette.testclient import TestClient

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, Node
from nomad_gpu.service.config.settings import SchedulingSettings, scheduling_from_mapping
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

TEAMS = {"vision": {"quota_gpu": 4, "lend_gpu": 3, "cohort": "research"},
         "nlp": {"quota_gpu": 2, "borrow_gpu": 4, "cohort": "research"}}


def _job(name: str, team: str, gpus: int) -> dict[str, Any]:
    return {"name": name, "team": team, "task": {"image": "busybox"}, "resources": {"cpu": 100, "memory": 128},
            "gpu": {"count": gpus}}


@pytest.fixture
def borrowing() -> Iterator[tuple[SchedulerService, TestClient]]:
    config = {"teams": TEAMS, "preemption": {"borrow_requires": "any"}}
    settings: SchedulingSettings = replace(scheduling_from_mapping(config), tick_s=0.01)
    ex = ManualExecutor()
    svc = SchedulerService(SqliteStore(), FakeNomad(), settings, clock=Clock(), executor=ex)
    gpus = tuple(Gpu(InstanceId(f"GPU-{k}"), "NVIDIA A100", 81_920) for k in range(8))
    svc.on_resync([Node(NodeId("n1"), name="gpu-01", cpu_mhz=64_000, memory_mb=512_000, gpus=gpus)], [])
    svc.submit(_job("own", "nlp", 2))
    svc.submit(_job("lent", "nlp", 3))
    svc.submit(_job("too-far", "nlp", 1))  # vision lends 3: a fourth GPU past nlp's quota is not lent
    svc.run_cycle()
    ex.run_all()
    yield svc, TestClient(create_app(svc))
    svc.stop()


def test_teams_show_what_is_borrowed_and_lent(borrowing: tuple[SchedulerService, TestClient]) -> None:
    _svc, client = borrowing
    rows = {r["team"]: r for r in client.get("/v1/teams").json()["teams"]}
    assert (rows["nlp"]["in_use_gpu"], rows["nlp"]["borrowed_gpu"], rows["nlp"]["lent_gpu"]) == (5.0, 3.0, 0.0)
    assert (rows["vision"]["borrowed_gpu"], rows["vision"]["lent_gpu"], rows["vision"]["cohort"]) == \
        (0.0, 3.0, "research")
    status = client.get("/v1/status").json()
    assert status["team_borrowed_gpu"] == {"nlp": 3.0}
    waiting = client.get("/v1/jobs?state=queued").json()["entries"]
    assert [e["name"] for e in waiting] == ["too-far"]
    assert "cohort research lends 3 GPU now, 3 of it to nlp already" in waiting[0]["reason"]


def test_metrics_show_borrowed_and_lent_per_team_of_a_cohort(borrowing: tuple[SchedulerService, TestClient]) -> None:
    _svc, client = borrowing
    text = client.get("/metrics").text
    assert 'nomad_gpu_team_gpu_borrowed{cohort="research",team="nlp"} 3.0' in text
    assert 'nomad_gpu_team_gpu_lent{cohort="research",team="vision"} 3.0' in text


def test_borrowed_hours_integrate_what_was_held_past_the_quota() -> None:
    from nomad_gpu.service.accounting.report import borrowed_hours

    # nlp (quota 2): 2 GPU for 2 h, plus 3 GPU from hour 1 to hour 3: 3 past its quota for 1 h, then 1 for 1 h
    intervals = [("nlp", 2.0, 0.0, 7200.0), ("nlp", 3.0, 3600.0, 10800.0), ("solo", 9.0, 0.0, 3600.0)]
    assert borrowed_hours(intervals, {"nlp": 2.0}) == {"nlp": 4.0}
    assert borrowed_hours(intervals, {"nlp": 10.0}) == {"nlp": 0.0}


def test_the_usage_report_by_team_says_what_a_cohorts_team_borrowed(
        borrowing: tuple[SchedulerService, TestClient]) -> None:
    _svc, client = borrowing
    rows = {r["key"]: r for r in client.get("/v1/usage?by=team").json()["rows"]}
    assert rows["nlp"]["borrowed_gpu_hours"] >= 0
    assert all("borrowed_gpu_hours" not in r for r in client.get("/v1/usage?by=class").json()["rows"])


def test_by_default_only_preemptible_work_runs_on_lent_quota() -> None:
    """`borrow_requires: preemptible` (the default): an exploratory job (preemptible by its class) borrows, a
    job without a class (never preemptible) and one that opts out wait at the quota."""
    ex = ManualExecutor()
    svc = SchedulerService(SqliteStore(), FakeNomad(), replace(scheduling_from_mapping({"teams": TEAMS}), tick_s=0.01),
                           clock=Clock(), executor=ex)
    gpus = tuple(Gpu(InstanceId(f"GPU-{k}"), "NVIDIA A100", 81_920) for k in range(8))
    svc.on_resync([Node(NodeId("n1"), name="gpu-01", cpu_mhz=64_000, memory_mb=512_000, gpus=gpus)], [])
    svc.submit(_job("own", "nlp", 2))
    svc.submit({**_job("explore", "nlp", 1), "class": "exploratory"})
    svc.submit(_job("plain", "nlp", 1))
    svc.submit({**_job("opted-out", "nlp", 1), "class": "exploratory", "preemptible": False})
    svc.run_cycle()
    ex.run_all()
    states = {e.name: e.state.value for e in svc.store.list()}
    assert states == {"own": "admitted", "explore": "admitted", "plain": "queued", "opted-out": "queued"}, states
    svc.stop()
