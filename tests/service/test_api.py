"""The service API over ASGI: submissions, validation errors as 4xx JSON, cancel, auth, metrics."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService

SPEC = """
name: api-job
team: vision
task: {image: busybox}
gpu: {count: 1}
"""




def test_submit_list_get_cancel(service: SchedulerService) -> None:
    client = TestClient(create_app(service))
    r = client.post("/v1/jobs", content=SPEC, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    (entry,) = r.json()["entries"]
    assert entry["state"] == "queued" and entry["nomad_job_id"].endswith(f"-{entry['id']}")
    assert [e["id"] for e in client.get("/v1/jobs?state=queued").json()["entries"]] == [entry["id"]]
    assert client.get(f"/v1/jobs/{entry['id']}").json()["name"] == "api-job"
    assert client.delete(f"/v1/jobs/{entry['id']}").json()["state"] == "cancelled"
    assert client.get("/v1/jobs?state=queued").json()["entries"] == []


@pytest.mark.parametrize(("body", "ctype", "status", "fragment"), [
    pytest.param("", "application/yaml", 400, "empty", id="empty"),
    pytest.param("name: [unclosed", "application/yaml", 400, "YAML", id="bad-yaml"),
    pytest.param("{", "application/json", 400, "JSON", id="bad-json"),
    pytest.param("name: x\ntask: {image: b}\ngpu: {count: 0}\n", "application/yaml", 400, "gpu.count", id="count"),
    pytest.param("name: x\ntask: {image: b}\nshare: {milli: 100}\ngroups_extra: 1\n", "application/yaml", 400,
                 "groups_extra", id="unknown-field"),
])
def test_bad_specs_are_4xx_json_and_store_nothing(service: SchedulerService, body: str, ctype: str, status: int,
                                                  fragment: str) -> None:
    client = TestClient(create_app(service))
    r = client.post("/v1/jobs", content=body, headers={"Content-Type": ctype})
    assert r.status_code == status
    assert fragment in r.json()["error"]
    assert service.store.list() == []


def test_a_share_group_with_count_above_one_is_refused(service: SchedulerService) -> None:
    client = TestClient(create_app(service))
    r = client.post("/v1/jobs", content="name: s\ntask: {image: b}\nshare: {milli: 250}\ncount: 2\n")
    assert r.status_code == 400 and "count 1" in r.json()["error"]


def test_idempotency_key(service: SchedulerService) -> None:
    client = TestClient(create_app(service))
    a = client.post("/v1/jobs", content=SPEC, headers={"Idempotency-Key": "abc"}).json()["entries"][0]
    b = client.post("/v1/jobs", content=SPEC, headers={"Idempotency-Key": "abc"}).json()["entries"][0]
    assert a["id"] == b["id"] and len(service.store.list()) == 1


def test_unknown_entry_and_endpoint(service: SchedulerService) -> None:
    client = TestClient(create_app(service))
    assert client.get("/v1/jobs/q999999").status_code == 404
    assert client.delete("/v1/jobs/q999999").status_code == 404
    r = client.get("/v1/nope")
    assert r.status_code == 404 and "error" in r.json()
    assert client.get("/v1/jobs?state=bogus").status_code == 400


def test_token_auth(service: SchedulerService) -> None:
    client = TestClient(create_app(service, token="s3cret"))
    assert client.get("/v1/status").status_code == 401
    assert client.get("/v1/status", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/metrics").status_code == 401  # the same rule as every other route
    assert client.get("/metrics", headers={"X-Nomad-Gpu-Token": "s3cret"}).status_code == 200
    opened = TestClient(create_app(service, token="s3cret", access=AccessSettings(metrics_open=True)))
    assert opened.get("/metrics").status_code == 200  # configured open for a scraper without a token
    assert opened.get("/v1/status").status_code == 401


def test_metrics_count_submissions(service: SchedulerService) -> None:
    client = TestClient(create_app(service))
    client.post("/v1/jobs", content=SPEC)
    assert "nomad_gpu_submitted_total 1.0" in client.get("/metrics").text


def test_the_list_pages_with_limit_and_offset(service: SchedulerService) -> None:
    client = TestClient(create_app(service))
    for i in range(5):
        assert client.post("/v1/jobs", content=SPEC.replace("api-job", f"job-{i}")).status_code == 201
    names = lambda r: [e["name"] for e in r.json()["entries"]]  # noqa: E731
    assert names(client.get("/v1/jobs")) == [f"job-{i}" for i in range(5)], "the default stays the full list"
    assert names(client.get("/v1/jobs", params={"limit": 2, "offset": 2})) == ["job-2", "job-3"]
    assert client.get("/v1/jobs", params={"offset": "-1"}).status_code == 400
