"""One team's request does not freeze the service (issue 31, item 2), over real loopback sockets.

The issue's body, `gpu_memory: "1" + 96,000 spaces + "!"`, took 43.6 s to refuse, and another team's
`/v1/status` waited as long: the size's pattern backtracked with the GIL held. Here the same body is
posted and, while its answer is due, `/v1/status` is asked on a second connection; both must answer
within a generous 10 s (the refusal itself takes milliseconds now).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
import requests

from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore
from tests.service.conftest import NoActuator

pytestmark = pytest.mark.server

WITHIN_S = 10.0


@pytest.fixture
def port() -> Iterator[int]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    server = ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False))
    server.bind()
    address = server.serve()
    yield int(address.rsplit(":", 1)[1])
    server.stop()
    service.stop()


def hostile_body(spaces: int) -> bytes:
    spec = {"name": "freeze", "team": "nlp", "class": "training", "task": {"image": "busybox"},
            "gpu_memory": "1" + " " * spaces + "!"}
    return json.dumps(spec).encode()


def answer_of(sock: socket.socket) -> bytes:
    """The whole answer to a request sent with `Connection: close`."""
    sock.settimeout(WITHIN_S)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_the_issues_body_is_refused_while_another_request_is_answered(port: int) -> None:
    body = hostile_body(96_000)
    with socket.create_connection(("127.0.0.1", port)) as hostile:
        hostile.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        other = requests.get(f"http://127.0.0.1:{port}/v1/status", timeout=WITHIN_S)
        assert other.status_code == 200
        head, _, payload = answer_of(hostile).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    error = json.loads(payload)["error"]
    assert error.startswith("gpu_memory: must be at most 64 characters, got 96002"), error
    assert len(payload) < 1000  # the 96 KB value is not sent back
