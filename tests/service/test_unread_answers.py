"""Connections that never read their answers cannot hold the API (issue 31, item 3), over real loopback sockets.

The attack: connections that send many ``GET /ui/app.js`` at once and never read a byte of the answers.
Waits here poll for an outcome up to a generous bound; nothing asserts how long a step took.
"""

from __future__ import annotations

import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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

TOKEN = "0123456789abcdef-admin"
APP_JS = b"GET /ui/app.js HTTP/1.1\r\nHost: localhost\r\n\r\n"
STATUS = b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n\r\n"
HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


@contextmanager
def serving(limits: HttpLimits, token: str | None = None, tls: tuple[str, str] | None = None) -> Iterator[int]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    plan = plan_listen(f"{'https' if tls else 'http'}://127.0.0.1:0", token_required=False,
                       tls_cert=tls[0] if tls else None, tls_key=tls[1] if tls else None)
    server = ApiServer(create_app(service, token=token), plan, limits=limits, tokens=(token,) if token else ())
    address = server.serve()
    try:
        yield int(address.rsplit(":", 1)[1])
    finally:
        server.stop()
        service.stop()


def hung_up(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closed ``sock`` within ``within_s``, found without reading a byte from it."""
    poller = select.poll()
    poller.register(sock, HANGUP)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if poller.poll(100):
            return True
    return False


def read_until_closed(sock: socket.socket, within_s: float = 10.0) -> bytes | None:
    """Everything the server sends until it closes ``sock`` (None: still open after ``within_s``)."""
    sock.settimeout(0.2)
    got = b""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return got
        if not chunk:
            return got
        got += chunk
    return None


class Attack:
    """``connections`` sockets that each send ``pipelined`` GET /ui/app.js and never read; one the server
    closes is opened again at once, so the attack never lets up."""

    def __init__(self, port: int, connections: int, pipelined: int) -> None:
        self.port, self.connections, self.burst = port, connections, APP_JS * pipelined
        self.stop = threading.Event()
        self.opened = 0
        self._thread = threading.Thread(target=self._run, name="attack", daemon=True)

    def __enter__(self) -> Attack:
        self._thread.start()
        deadline = time.monotonic() + 30
        while self.opened < self.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the server reads and starts answering them
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(10)

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            s.setblocking(False)
            s.send(self.burst)  # one segment on loopback
        except OSError:
            return None
        self.opened += 1
        return s

    def _run(self) -> None:
        socks: dict[int, socket.socket] = {}
        poller = select.poll()
        try:
            while not self.stop.is_set():
                while len(socks) < self.connections and not self.stop.is_set():
                    s = self._open()
                    if s is None:
                        break
                    socks[s.fileno()] = s
                    poller.register(s, HANGUP)
                for fd, _ in poller.poll(50):
                    poller.unregister(fd)
                    socks.pop(fd).close()
        finally:
            for s in socks.values():
                s.close()


@pytest.mark.parametrize("token, headers", [
    pytest.param(TOKEN, {"Authorization": f"Bearer {TOKEN}"}, id="admin-token"),
    pytest.param(None, {"X-Nomad-Gpu-Client": "cli"}, id="no-tokens-client-header"),
])
def test_unread_pipelined_answers_leave_room_for_the_api(token: str | None, headers: dict[str, str]) -> None:
    """The issue's attack at a tenth of its size: 120 connections against a cap of 100, each with 200
    GET /ui/app.js sent ahead and never read, opened again as soon as the server closes one.
    Before: every one of them stayed open for ever and every legitimate request was answered 503."""
    with serving(HttpLimits(max_connections=100), token) as port, Attack(port, 120, 200):
        answers = [requests.get(f"http://127.0.0.1:{port}/v1/status", headers=headers, timeout=10).status_code
                   for _ in range(8)]
    assert answers == [200] * 8


def test_a_connection_that_never_reads_its_answers_is_closed() -> None:
    """200 answers of app.js (6 MB, more than the kernel's buffers hold), none read: the connection is closed
    ``write_timeout_s`` after its writes stopped, before all of them were sent. Before: open for ever."""
    with serving(HttpLimits(write_timeout_s=1.0, max_pipelined=1000)) as port:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(APP_JS * 200)
            closed = hung_up(s, within_s=20)
            got = read_until_closed(s)
    assert closed
    assert got is not None and got.count(b"HTTP/1.1 200") < 200


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return str(cert), str(key)


def test_a_tls_connection_that_never_reads_its_answers_is_closed(certificate: tuple[str, str]) -> None:
    """The same over TLS, whose transport buffers and pauses on its own terms."""
    with serving(HttpLimits(write_timeout_s=1.0, max_pipelined=1000), tls=certificate) as port:
        context = ssl.create_default_context(cafile=certificate[0])
        with context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1") as s:
            s.sendall(APP_JS * 200)
            assert hung_up(s, within_s=20)


def test_requests_sent_ahead_past_max_pipelined_are_not_answered() -> None:
    """20 requests in one send with max_pipelined 4: four answers, the last saying ``connection: close``,
    then the connection closes (the client sends the rest again, RFC 9112 9.3.2). Before: 20 answers."""
    with serving(HttpLimits(max_pipelined=4)) as port, socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(STATUS * 20)
        got = read_until_closed(s)
    assert got is not None
    answers = got.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"200"] * 4
    assert b"connection: close" in answers[-1].lower() and b"connection: close" not in answers[0].lower()


def read_answers(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` whole answers (head and body, by their ``content-length``)."""
    sock.settimeout(5)
    buffer, answers = b"", list[bytes]()
    while len(answers) < count:
        head, sep, rest = buffer.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                       if line.startswith(b"content-length:")), None)
        if sep and length is not None and len(rest) >= length:
            answers.append(head + sep + rest[:length])
            buffer = rest[length:]
            continue
        chunk = sock.recv(65536)
        assert chunk, "closed early"
        buffer += chunk
    return answers


def test_max_pipelined_requests_sent_ahead_and_requests_one_by_one_are_all_answered() -> None:
    with serving(HttpLimits(max_pipelined=4)) as port, socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(STATUS * 4)
        answers = read_answers(s, 4)
        for _ in range(10):  # one at a time, each after its answer: never a run sent ahead
            s.sendall(STATUS)
            answers += read_answers(s, 1)
        assert not hung_up(s, within_s=0.3)
    assert all(a.startswith(b"HTTP/1.1 200") and b"connection: close" not in a.lower() for a in answers)


def test_slow_bodies_without_a_token_leave_the_reserved_connections() -> None:
    """30 connections each send a request head and never its body (mid-request, so none may be closed to make
    room) against a cap of 20 with 4 kept in reserve: an admin's request is still answered.
    Before: all 20 were taken and the admin was answered 503 "too many open connections"."""
    limits = HttpLimits(max_connections=20, reserved_connections=4)
    head = b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/yaml\r\nContent-Length: 100\r\n\r\n"
    with serving(limits, TOKEN) as port:
        slow = []
        try:
            for _ in range(30):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(head)
                slow.append(s)
                time.sleep(0.02)
            time.sleep(0.5)
            r = requests.get(f"http://127.0.0.1:{port}/v1/status", headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=10)
            refused = sum(1 for s in slow if hung_up(s, within_s=0.05))
        finally:
            for s in slow:
                s.close()
    assert r.status_code == 200
    assert refused >= 30 - (20 - 4)
