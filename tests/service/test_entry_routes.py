"""Routes on one entry or sweep: hold, release, requeue, priority, sweep cancel, allocations, HCL, logs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from nomad_gpu.nomad.client import NomadNotFound, NomadUnavailable
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore

VISION = "vision-0123456789abcdef"
NLP = "nlp-0123456789abcdef0000"
ROOT = "admin-0123456789abcdef00"
ACCESS = AccessSettings(tokens={VISION: "vision", NLP: "nlp"})
SPEC = "name: {name}\nteam: vision\ntask: {{image: busybox}}\ngpu: {{count: 1}}\n"
SWEEP = ("kind: sweep\nname: lr\nteam: vision\ntask: {image: busybox}\ngpu: {count: 1}\n"
         "sweep: {parameters: {lr: [0.1, 0.01, 0.001]}}\n")


class NoActuator:
    def submit(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("no registration expected")

    def stop(self, *args: Any, **kwargs: Any) -> None:
        pass


class FakeNomad:
    """What Nomad holds for one job: allocations, submissions by version, logs by (alloc, task, type)."""

    def __init__(self) -> None:
        self.allocs: list[dict[str, Any]] = []
        self.version = 0
        self.sources: dict[int, str] = {}
        self.logs: dict[tuple[str, str, str], bytes] = {}
        self.down = False
        self.calls: list[tuple[str, Any]] = []

    def job(self, job_id: str, namespace: str | None = None) -> dict[str, Any] | None:
        return {"ID": job_id, "Version": self.version} if self.sources else None

    def job_allocations(self, job_id: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if self.down:
            raise NomadUnavailable("list allocations: cannot reach Nomad (ConnectionError)")
        self.calls.append(("allocs", (job_id, namespace)))
        return list(self.allocs)

    def job_submission(self, job_id: str, version: int, namespace: str | None = None) -> dict[str, Any] | None:
        self.calls.append(("submission", (job_id, version, namespace)))
        source = self.sources.get(version)
        return None if source is None else {"Source": source, "Format": "hcl2", "Version": version}

    def task_logs(self, alloc_id: str, task: str, log_type: str, *, offset: int = 0, origin: str = "start",
                  timeout_s: float | None = None) -> bytes:
        assert timeout_s is not None, "every read from Nomad has a timeout"
        key = (alloc_id, task, log_type)
        if key not in self.logs:
            raise NomadNotFound(f'task "{task}" not started yet. No logs available')
        return self.logs[key][offset:]


def alloc(alloc_id: str, status: str = "running", name: str = "j.main[0]", create: int = 10,
          tasks: tuple[str, ...] = ("main",)) -> dict[str, Any]:
    return {"ID": alloc_id, "Name": name, "TaskGroup": name.split(".")[1].split("[")[0], "NodeID": "n1",
            "NodeName": "gpu-01", "ClientStatus": status, "DesiredStatus": "run", "CreateIndex": create,
            "TaskStates": {t: {"State": status} for t in tasks}}


@pytest.fixture
def service() -> Iterator[SchedulerService]:
    svc = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())  # type: ignore[arg-type]
    yield svc
    svc.stop()


@pytest.fixture
def nomad() -> FakeNomad:
    return FakeNomad()


@pytest.fixture
def client(service: SchedulerService, nomad: FakeNomad) -> TestClient:
    return TestClient(create_app(service, token=ROOT, access=ACCESS, nomad=nomad,
                                 nomad_address="https://nomad.example:4646/"))


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submit(client: TestClient, name: str = "job", token: str = VISION) -> dict[str, Any]:
    r = client.post("/v1/jobs", content=SPEC.format(name=name), headers=as_(token))
    assert r.status_code == 201, r.text
    return dict(r.json()["entries"][0])


def run(service: SchedulerService, entry_id: str, at: float = 1000.0) -> None:
    """Move an entry to running in the store, as the life cycle would once Nomad placed it."""
    service.store.transition(entry_id, EntryState.ADMITTED, expect=(EntryState.QUEUED,), admitted_at=at - 5, at=at - 5)
    service.store.transition(entry_id, EntryState.RUNNING, expect=(EntryState.ADMITTED,), at=at, registered_at=at - 4)


def test_hold_keeps_the_place_and_release_gives_it_back(client: TestClient) -> None:
    e = submit(client)
    r = client.post(f"/v1/jobs/{e['id']}/hold", headers=as_(VISION))
    assert r.status_code == 200 and r.json()["held"] is True and r.json()["state"] == "queued"
    assert client.get(f"/v1/jobs/{e['id']}", headers=as_(VISION)).json()["held"] is True
    r = client.post(f"/v1/jobs/{e['id']}/release", headers=as_(VISION))
    assert r.status_code == 200 and r.json()["held"] is False


def test_a_state_that_does_not_allow_it_is_a_409(client: TestClient, service: SchedulerService) -> None:
    e = submit(client)
    run(service, e["id"])
    r = client.post(f"/v1/jobs/{e['id']}/hold", headers=as_(ROOT))
    assert r.status_code == 409 and "running" in r.json()["error"]
    client.delete(f"/v1/jobs/{submit(client, 'other')['id']}", headers=as_(ROOT))
    done = service.store.list([EntryState.CANCELLED])[0]
    for path, method, body in ((f"/v1/jobs/{done.id}/requeue", "POST", None),
                               (f"/v1/jobs/{done.id}", "PATCH", {"priority": 70})):
        r = client.request(method, path, json=body, headers=as_(ROOT))
        assert r.status_code == 409, r.text
        assert "cancelled" in r.json()["error"]


def test_requeue_of_a_queued_entry_leaves_it_as_it_is(client: TestClient) -> None:
    e = submit(client)
    r = client.post(f"/v1/jobs/{e['id']}/requeue", headers=as_(VISION))
    assert r.status_code == 200 and r.json()["state"] == "queued" and r.json()["attempts"] == e["attempts"]


def test_priority_is_changed_and_checked(client: TestClient) -> None:
    e = submit(client)
    r = client.patch(f"/v1/jobs/{e['id']}", json={"priority": 90}, headers=as_(VISION))
    assert r.status_code == 200 and r.json()["priority"] == 90
    for body, fragment in (({"priority": 0}, "1 to 100"), ({"priority": "high"}, "1 to 100"),
                           ({"priority": True}, "1 to 100"), ({"name": "x"}, "cannot change name"),
                           ({}, "JSON object"), ([1], "JSON object")):
        r = client.patch(f"/v1/jobs/{e['id']}", json=body, headers=as_(VISION))
        assert r.status_code == 400 and fragment in r.json()["error"], (body, r.text)
    r = client.patch(f"/v1/jobs/{e['id']}", content=b"{", headers=as_(VISION))
    assert r.status_code == 400 and "not JSON" in r.json()["error"]
    assert client.get(f"/v1/jobs/{e['id']}", headers=as_(VISION)).json()["priority"] == 90


def test_another_teams_entry_does_not_exist_for_a_team_token(client: TestClient) -> None:
    e = submit(client)
    for method, path, body in (("POST", "hold", None), ("POST", "release", None), ("POST", "requeue", None),
                               ("PATCH", "", {"priority": 5}), ("GET", "allocations", None), ("GET", "hcl", None),
                               ("GET", "logs", None)):
        url = f"/v1/jobs/{e['id']}" + (f"/{path}" if path else "")
        r = client.request(method, url, json=body, headers=as_(NLP))
        assert r.status_code == 404 and r.json()["error"] == f"no queue entry {e['id']!r}", (method, path)
    assert client.get(f"/v1/jobs/{e['id']}", headers=as_(VISION)).json()["held"] is False


def test_unknown_ids_are_404(client: TestClient) -> None:
    for method, path in (("POST", "/v1/jobs/q999999/hold"), ("PATCH", "/v1/jobs/q999999"),
                         ("DELETE", "/v1/sweeps/nope-1")):
        r = client.request(method, path, json={"priority": 5}, headers=as_(ROOT))
        assert r.status_code == 404, (method, path, r.text)


def test_cancel_a_sweep_ends_every_trial_for_its_team_only(client: TestClient, service: SchedulerService) -> None:
    trials = client.post("/v1/jobs", content=SWEEP, headers=as_(VISION)).json()["entries"]
    sweep_id = trials[0]["sweep"]
    run(service, trials[0]["id"])
    assert client.delete(f"/v1/sweeps/{sweep_id}", headers=as_(NLP)).status_code == 404
    r = client.delete(f"/v1/sweeps/{sweep_id}", headers=as_(VISION))
    assert r.status_code == 200, r.text
    assert r.json()["total"] == 3
    queued = [e for e in service.store.list(sweep=sweep_id) if e.id != trials[0]["id"]]
    assert {e.state for e in queued} == {EntryState.CANCELLED}


def test_an_entry_never_registered_has_no_nomad_link(client: TestClient, nomad: FakeNomad) -> None:
    """A queued entry's job ID names a job Nomad has never had: a link to it is a 404 in Nomad's UI."""
    e = submit(client)
    r = client.get(f"/v1/jobs/{e['id']}/allocations", headers=as_(VISION))
    assert r.status_code == 200, r.text
    assert "nomad_ui" not in r.json() and r.json()["allocations"] == []


def test_allocations_and_times_from_nomad(client: TestClient, service: SchedulerService, nomad: FakeNomad) -> None:
    e = submit(client)
    run(service, e["id"], at=e["submitted_at"] + 30)
    nomad.allocs = [alloc("a2", create=12), alloc("a1", "failed", create=11)]
    r = client.get(f"/v1/jobs/{e['id']}/allocations", headers=as_(VISION))
    assert r.status_code == 200, r.text
    body = r.json()
    assert [a["id"] for a in body["allocations"]] == ["a1", "a2"]
    assert body["allocations"][1] == {"id": "a2", "group": "main", "index": 0, "node_id": "n1", "node_name": "gpu-01",
                                      "client_status": "running", "desired_status": "run", "tasks": ["main"]}
    assert body["started_at"] == e["submitted_at"] + 30 and body["admitted_at"] == e["submitted_at"] + 25
    assert body["waited_s"] == pytest.approx(25.0)
    assert body["nomad_ui"] == f"https://nomad.example:4646/ui/jobs/{e['nomad_job_id']}@default"
    assert nomad.calls == [("allocs", (e["nomad_job_id"], "default"))]
    nomad.down = True
    r = client.get(f"/v1/jobs/{e['id']}/allocations", headers=as_(VISION))
    assert r.status_code == 502 and "cannot reach Nomad" in r.json()["error"]


def test_a_queued_entry_has_no_allocations_and_no_hcl(client: TestClient, nomad: FakeNomad) -> None:
    e = submit(client)
    assert client.get(f"/v1/jobs/{e['id']}/allocations", headers=as_(VISION)).json()["allocations"] == []
    assert nomad.calls == [], "a queued entry has no Nomad job to ask about"
    r = client.get(f"/v1/jobs/{e['id']}/hcl", headers=as_(VISION))
    assert r.status_code == 409 and "never sent to Nomad" in r.json()["error"]


def test_hcl_is_read_back_at_the_jobs_version(client: TestClient, service: SchedulerService, nomad: FakeNomad) -> None:
    e = submit(client)
    run(service, e["id"])
    nomad.version, nomad.sources = 2, {0: "old", 2: 'job "x" {}\n'}
    r = client.get(f"/v1/jobs/{e['id']}/hcl", headers=as_(VISION))
    assert r.status_code == 200 and r.json()["hcl"] == 'job "x" {}\n' and r.json()["version"] == 2
    nomad.sources = {}
    r = client.get(f"/v1/jobs/{e['id']}/hcl", headers=as_(VISION))
    assert r.status_code == 404 and "no source" in r.json()["error"]


def test_logs_from_the_newest_allocation_with_offsets(client: TestClient, service: SchedulerService,
                                                      nomad: FakeNomad) -> None:
    e = submit(client)
    r = client.get(f"/v1/jobs/{e['id']}/logs", headers=as_(VISION))
    assert r.status_code == 409 and "queued" in r.json()["error"]
    run(service, e["id"])
    nomad.allocs = [alloc("old", "failed", create=5), alloc("new", create=9)]
    nomad.logs = {("new", "main", "stdout"): b"one\ntwo\n", ("new", "main", "stderr"): b"oops\n",
                  ("old", "main", "stdout"): b"first attempt\n"}
    r = client.get(f"/v1/jobs/{e['id']}/logs", headers=as_(VISION))
    assert r.status_code == 200 and r.text == "one\ntwo\n"
    assert r.headers["x-log-offset"] == "8" and r.headers["x-log-ended"] == "false"
    assert r.headers["x-allocation-id"] == "new" and r.headers["x-task"] == "main"
    r = client.get(f"/v1/jobs/{e['id']}/logs", params={"offset": 4}, headers=as_(VISION))
    assert r.text == "two\n" and r.headers["x-log-offset"] == "8"
    assert client.get(f"/v1/jobs/{e['id']}/logs", params={"type": "stderr"}, headers=as_(VISION)).text == "oops\n"
    for params, status in (({"type": "both"}, 400), ({"offset": "-1"}, 400), ({"group": "nope"}, 404)):
        r = client.get(f"/v1/jobs/{e['id']}/logs", params=params, headers=as_(VISION))
        assert r.status_code == status, (params, r.text)
    nomad.allocs = [alloc("new", "complete", create=9, tasks=("main", "sidecar"))]
    r = client.get(f"/v1/jobs/{e['id']}/logs", headers=as_(VISION))
    assert r.status_code == 400 and "main, sidecar" in r.json()["error"]
    r = client.get(f"/v1/jobs/{e['id']}/logs", params={"task": "main"}, headers=as_(VISION))
    assert r.status_code == 200 and r.headers["x-log-ended"] == "true"
    r = client.get(f"/v1/jobs/{e['id']}/logs", params={"task": "sidecar"}, headers=as_(VISION))
    assert r.status_code == 404 and "not started yet" in r.json()["error"]


def test_without_a_nomad_client_the_reads_say_so(service: SchedulerService) -> None:
    plain = TestClient(create_app(service))
    e = plain.post("/v1/jobs", content=SPEC.format(name="x")).json()["entries"][0]
    r = plain.get(f"/v1/jobs/{e['id']}/logs")
    assert r.status_code == 503
    run(service, e["id"])
    r = plain.get(f"/v1/jobs/{e['id']}/hcl")
    assert r.status_code == 503 and "no Nomad client" in r.json()["error"]
