"""Idle and slow connections cannot shut the API (issue 26, item 3), over real loopback sockets.

Waits here poll for an outcome up to a generous bound; nothing asserts how long a step took.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from nomad_gpu.service.config.limits import HttpLimits
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore
from tests.service.conftest import NoActuator

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
SHORT = HttpLimits(head_timeout_s=1.5, body_timeout_s=0.5, keep_alive_s=1.0, max_connections=8)


@pytest.fixture
def port() -> Iterator[int]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    server = ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False), limits=SHORT)
    server.bind()
    address = server.serve()
    yield int(address.rsplit(":", 1)[1])
    server.stop()
    service.stop()


def closed_by_server(sock: socket.socket, keep_sending: Callable[[], None] | None = None,
                     within_s: float = 10.0) -> bytes | None:
    """What the server sent before closing ``sock`` (None: still open after ``within_s``)."""
    sock.settimeout(0.1)
    got = b""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            if keep_sending is not None:
                try:
                    keep_sending()
                except OSError:
                    return got
            continue
        except OSError:
            return got
        if not chunk:
            return got
        got += chunk
    return None


def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        got = closed_by_server(s)
    assert got is not None and got.startswith(b"HTTP/1.1 408")


def test_a_head_sent_a_byte_at_a_time_does_not_keep_the_connection(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n")
        got = closed_by_server(s, keep_sending=lambda: s.sendall(b"X"))
    assert got is not None and got.startswith(b"HTTP/1.1 408")


def test_a_body_that_stops_arriving_is_dropped(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/yaml\r\n"
                  b"Content-Length: 1000\r\n\r\nname: x\n")
        assert closed_by_server(s) is not None


def test_idle_connections_at_the_cap_make_room_for_a_request(port: int) -> None:
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3 * SHORT.max_connections)]
    try:
        r = requests.get(f"http://127.0.0.1:{port}/v1/status", timeout=5)
        assert r.status_code == 200
        assert sum(closed_by_server(s, within_s=0.2) is not None for s in idle) >= 2 * SHORT.max_connections
    finally:
        for s in idle:
            s.close()


def test_a_keep_alive_connection_is_served_again_then_closed_when_idle(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        for _ in range(2):
            conn.request("GET", "/v1/status")
            reply = conn.getresponse()
            assert reply.status == 200 and reply.read()
        assert conn.sock is not None
        assert closed_by_server(conn.sock) == b""  # the keep-alive timer, before the head deadline
    finally:
        conn.close()


SERVE_WITH_FEW_DESCRIPTORS = textwrap.dedent("""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))
    from nomad_gpu.service.loglimit import configure_logging
    configure_logging(20)
    from nomad_gpu.service.http.api import create_app
    from nomad_gpu.service.http.listen import ApiServer, plan_listen
    from nomad_gpu.service.loops.scheduler import SchedulerService
    from nomad_gpu.service.config.settings import SchedulingSettings
    from nomad_gpu.store import SqliteStore
    from tests.service.conftest import NoActuator
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    print(ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False)).serve(), flush=True)
    time.sleep(120)
""")


def test_more_idle_connections_than_descriptors_leave_status_answering() -> None:
    """The issue's attack at a smaller scale: 300 silent connections against a 160-descriptor limit.
    Before: accept failed on every turn, /v1/status timed out and the failure was logged ~150 times a second."""
    proc = subprocess.Popen([sys.executable, "-c", SERVE_WITH_FEW_DESCRIPTORS], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    idle: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        port = int(address.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
        r = requests.get(f"{address}/v1/status", timeout=10)
        assert r.status_code == 200
        time.sleep(1.0)  # the repeated accept failures, had there been any, pile up meanwhile
    finally:
        for s in idle:
            s.close()
        proc.kill()
        _, err = proc.communicate(timeout=10)
    records = [line for line in err.splitlines() if line[:2] == "20"]  # a record's first line starts with its time
    assert len(records) < 15, err[-2000:]
