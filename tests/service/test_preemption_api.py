"""What the API says of preemption: a checkpoint grace past the nodes' max_kill_timeout is accepted with a
warning (the submit reply, the entry, `status`); bad input is a 400 naming the key and stores nothing."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from nomad_gpu.service.admission.access import Caller, status_view
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService

SPEC = "name: ck\nteam: vision\nclass: training\ntask: {image: busybox}\ngpu: {count: 1}\n"


def test_a_long_grace_is_accepted_with_a_warning(service: SchedulerService) -> None:
    client = TestClient(create_app(service))
    r = client.post("/v1/jobs", content=SPEC + "checkpoint: {signal: SIGUSR1, grace: 2m}\n")
    assert r.status_code == 201, r.text
    (entry,) = r.json()["entries"]
    (warning,) = entry["warnings"]
    assert "checkpoint.grace 120 s" in warning and "max_kill_timeout (30 s)" in warning
    assert client.get(f"/v1/jobs/{entry['id']}").json()["warnings"] == [warning]
    service.run_cycle()
    assert client.get("/v1/status").json()["grace_warnings"] == {entry["id"]: warning}
    short = client.post("/v1/jobs", content=SPEC.replace("name: ck", "name: short") + "checkpoint: {grace: 20s}\n")
    assert short.json()["entries"][0]["warnings"] == [] and short.json()["entries"][0]["preemptions"] == 0


@pytest.mark.parametrize(("extra", "key"), [
    pytest.param("preemptible: 'yes'\n", "preemptible", id="preemptible-a-string"),
    pytest.param("checkpoint: {grace: -1m}\n", "checkpoint.grace", id="negative-grace"),
    pytest.param("checkpoint: {grace: 2d}\n", "checkpoint.grace", id="absurd-grace"),
    pytest.param("checkpoint: {signal: SIGSTOP}\n", "checkpoint.signal", id="unknown-signal"),
])
def test_bad_input_is_a_400_naming_the_key(service: SchedulerService, extra: str, key: str) -> None:
    client = TestClient(create_app(service))
    r = client.post("/v1/jobs", content=SPEC + extra)
    assert r.status_code == 400 and key in r.json()["error"], r.text
    assert service.store.list() == []


def test_a_team_sees_only_its_own_preemptions_and_warnings() -> None:
    raw = {"preemptions": [{"preemptor": "q1", "victims": ["q2"]}, {"preemptor": "q3", "victims": ["q4"]}],
           "grace_warnings": {"q1": "w1", "q5": "w5"}}
    teams = {"q1": "vision", "q3": "speech", "q5": "speech"}
    view = status_view(raw, Caller("vision"), teams)
    assert view["preemptions"] == [{"preemptor": "q1", "victims": ["q2"]}] and view["grace_warnings"] == {"q1": "w1"}
    assert status_view(raw, Caller(None), teams) == raw
