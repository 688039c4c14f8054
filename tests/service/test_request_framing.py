"""A request that gives both `Content-Length` and `Transfer-Encoding` is refused (issue 26, item 15): the
two disagree on where its body ends, and the service answered the bytes after the chunked body as a second
request (what a proxy that trusts `Content-Length` would take for body: request smuggling)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService

pytestmark = pytest.mark.server


@pytest.fixture
def port(service: SchedulerService) -> Iterator[int]:
    server = ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False))
    address = server.serve()
    yield int(address.rsplit(":", 1)[1])
    server.stop()


def exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(raw)
        s.settimeout(5)
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return got
            if not chunk:
                return got
            got += chunk


def test_both_lengths_are_refused_and_nothing_after_them_is_answered(port: int) -> None:
    got = exchange(port, b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/yaml\r\n"
                         b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                         b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert got.count(b"HTTP/1.1 ") == 1 and got.startswith(b"HTTP/1.1 400"), got[:300]


def test_one_length_and_keep_alive_still_work(port: int) -> None:
    got = exchange(port, b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n\r\n"
                         b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert got.count(b"HTTP/1.1 200") == 2
