"""A web page the user opens cannot drive the service on loopback (issue 26, item 2).

Without tokens (``nomad-gpu dev``, ``serve`` on loopback) any page could POST a "simple" cross-origin
request (``text/plain``, no preflight) and run a command on the cluster, and a DNS-rebound name could
read every entry with its env. Over real sockets: a Host that is not a loopback name or a configured one
is refused, a state change must be JSON or YAML, and a bodiless one must carry a header that a browser
sends cross-site only after a preflight, which the service never grants.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore
from tests.service.conftest import NoActuator

pytestmark = pytest.mark.server

SPEC = "name: x\ntask: {driver: exec, command: /bin/sh, args: [-c, 'touch /tmp/owned']}\n"
CLIENT_HEADER = {"X-Nomad-Gpu-Client": "test"}


@pytest.fixture
def served() -> Iterator[tuple[SchedulerService, str]]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    server = ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False),
                       hosts=frozenset({"gpu-queue.internal"}))
    server.bind()
    address = server.serve()
    yield service, address
    server.stop()
    service.stop()


def queued(service: SchedulerService) -> list[str]:
    return [e.id for e in service.store.list([EntryState.QUEUED])]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8123", "127.0.0.1.nip.io", "localhost.evil.example"])
def test_a_foreign_host_is_refused(served: tuple[SchedulerService, str], host: str) -> None:
    service, address = served
    service.submit({"name": "secret", "task": {"image": "i", "env": {"API_KEY": "hunter2"}}})
    r = requests.get(f"{address}/v1/jobs", headers={"Host": host}, timeout=5)
    assert r.status_code == 421
    assert "hunter2" not in r.text and "api.hosts" in r.json()["error"]


@pytest.mark.parametrize("host", ["localhost", "localhost:9", "127.0.0.1:4999", "[::1]:22", "gpu-queue.internal:80",
                                  "LOCALHOST:1"])
def test_loopback_names_on_any_port_and_configured_names_are_served(served: tuple[SchedulerService, str],
                                                                    host: str) -> None:
    _, address = served
    assert requests.get(f"{address}/v1/status", headers={"Host": host}, timeout=5).status_code == 200


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
def test_a_simple_cross_site_submit_is_refused(served: tuple[SchedulerService, str], content_type: str | None) -> None:
    service, address = served
    headers = {} if content_type is None else {"Content-Type": content_type}  # none: a fetch of a typeless Blob
    r = requests.post(f"{address}/v1/jobs", data=SPEC.encode(), headers=headers, timeout=5)
    assert r.status_code in (403, 415), r.text
    assert queued(service) == []


@pytest.mark.parametrize("content_type", ["application/yaml", "application/json", "text/yaml", "application/x-yaml"])
def test_json_and_yaml_submits_are_served(served: tuple[SchedulerService, str], content_type: str) -> None:
    service, address = served
    body = '{"name": "x", "task": {"image": "i"}}' if "json" in content_type else SPEC
    r = requests.post(f"{address}/v1/jobs", data=body.encode(), headers={"Content-Type": content_type}, timeout=5)
    assert r.status_code == 201, r.text


def test_bodiless_state_changes_need_the_client_header(served: tuple[SchedulerService, str]) -> None:
    service, address = served
    entry = service.submit({"name": "x", "task": {"image": "i"}})[0].id
    for method, path in [("POST", f"/v1/jobs/{entry}/hold"), ("POST", f"/v1/jobs/{entry}/requeue"),
                         ("POST", f"/v1/jobs/{entry}/release")]:
        r = requests.request(method, f"{address}{path}", timeout=5)
        assert r.status_code == 403 and "X-Nomad-Gpu-Client" in r.json()["error"], (method, path)
    assert service.store.get(entry).state is EntryState.QUEUED and not service.store.get(entry).held
    r = requests.post(f"{address}/v1/jobs/{entry}/hold", headers=CLIENT_HEADER, timeout=5)
    assert r.status_code == 200 and service.store.get(entry).held


def test_a_delete_needs_no_client_header_but_a_foreign_origin_is_still_refused(
        served: tuple[SchedulerService, str]) -> None:
    """Issue 31, item 9: a browser sends DELETE cross-site only after a preflight, which is never granted,
    so `curl -X DELETE` on loopback is served as it is; a request naming a foreign Origin is not."""
    service, address = served
    entry = service.submit({"name": "x", "task": {"image": "i"}})[0].id
    preflight = requests.options(f"{address}/v1/jobs/{entry}", timeout=5, headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "DELETE"})
    assert preflight.status_code >= 400
    assert not any(h.lower().startswith("access-control-") for h in preflight.headers)
    same_site = requests.options(f"{address}/v1/jobs/{entry}", timeout=5, headers={"Origin": address,
                                 "Access-Control-Request-Method": "DELETE"})
    assert same_site.status_code >= 400
    assert not any(h.lower().startswith("access-control-") for h in same_site.headers)
    r = requests.delete(f"{address}/v1/jobs/{entry}", headers={"Origin": "http://evil.example"}, timeout=5)
    assert r.status_code == 403 and "origin" in r.json()["error"]
    assert service.store.get(entry).state is EntryState.QUEUED
    r = requests.delete(f"{address}/v1/jobs/{entry}", timeout=5)
    assert r.status_code == 200, r.text
    assert service.store.get(entry).state is EntryState.CANCELLED


def test_a_preflight_is_never_granted(served: tuple[SchedulerService, str]) -> None:
    _, address = served
    r = requests.options(f"{address}/v1/jobs", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-nomad-gpu-client, content-type"}, timeout=5)
    assert r.status_code >= 400
    assert not any(h.lower().startswith("access-control-") for h in r.headers)


def test_a_cross_origin_state_change_is_refused_even_with_the_right_type(served: tuple[SchedulerService, str]) -> None:
    service, address = served
    r = requests.post(f"{address}/v1/jobs", data=SPEC.encode(), timeout=5,
                      headers={"Content-Type": "application/yaml", "Origin": "http://evil.example"})
    assert r.status_code == 403 and queued(service) == []
    ok = requests.post(f"{address}/v1/jobs", data=SPEC.encode(), timeout=5,
                       headers={"Content-Type": "application/yaml", "Origin": address})
    assert ok.status_code == 201


def test_the_cli_sends_what_the_guard_asks(served: tuple[SchedulerService, str]) -> None:
    service, address = served
    entry = service.submit({"name": "x", "task": {"image": "i"}})[0].id
    env = {"NOMAD_GPU_ADDR": address, "NOMAD_GPU_TOKEN": ""}
    for args in (["hold", entry], ["release", entry], ["cancel", entry]):
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 0, (args, result.output)
    assert service.store.get(entry).state is EntryState.CANCELLED


def test_the_config_names_extra_hosts() -> None:
    from nomad_gpu.domain.errors import InvalidRequest
    from nomad_gpu.service.config.settings import access_from_mapping
    assert access_from_mapping({"hosts": ["GPU-Queue.example", "10.0.0.5"]}).hosts == {"gpu-queue.example",
                                                                                        "10.0.0.5"}
    with pytest.raises(InvalidRequest, match="hosts"):
        access_from_mapping({"hosts": ["http://x:80"]})
