"""Bytes that used to answer 500 or log tracebacks (issue 26, item 13): a NUL byte in a YAML body, a
5,000-digit number, and a client that goes away mid-body (one log line, no traceback)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService


@pytest.mark.parametrize(("body", "fragment"), [
    pytest.param("name: x\x00\ntask: {image: i}\n", "character", id="nul-in-yaml"),
    pytest.param("kind: " + "1" * 5000 + "\nname: x\ntask: {image: i}\n", "digits", id="long-kind-yaml"),
    pytest.param('{"kind": ' + "1" * 5000 + ', "name": "x"}', "digits", id="long-kind-json"),
])
def test_bad_bytes_are_400_with_one_line(service: SchedulerService, body: str, fragment: str) -> None:
    client = TestClient(create_app(service), raise_server_exceptions=False)
    kind = "application/json" if body.startswith("{") else "application/yaml"
    r = client.post("/v1/jobs", content=body.encode(), headers={"Content-Type": kind})
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"] and "\n" not in r.json()["error"]


@pytest.fixture
def port(service: SchedulerService) -> Iterator[int]:
    server = ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False))
    address = server.serve()
    yield int(address.rsplit(":", 1)[1])
    server.stop()


@pytest.mark.server
def test_a_client_gone_mid_body_is_one_line_without_a_traceback(port: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/yaml\r\n"
                  b"Content-Length: 1000\r\n\r\nname: x\n")
        time.sleep(0.2)  # the body is being read when the client goes
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any("went away" in r.getMessage() for r in caplog.records):
        time.sleep(0.05)
    mine = [r for r in caplog.records if r.name.startswith(("nomad_gpu", "uvicorn"))]
    assert [r.getMessage() for r in mine if "went away" in r.getMessage()], [r.getMessage() for r in mine]
    assert not any(r.exc_info for r in mine), [r.getMessage() for r in mine]
