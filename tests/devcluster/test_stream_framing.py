"""The event stream's bytes on the wire, read from a raw socket, for each Nomad version the dev cluster plays.

From 1.11.2 (`command/agent/event_endpoint.go`, v2.0.5) the handler hijacks the connection and writes
`HTTP/1.1 200 OK` itself, with no Content-Length and no chunking, and the body ends at close; up to
1.11.1 (same file, v1.11.1; v1.10.5 is the same) net/http chunks it, gzipped when asked
(gorilla/handlers `CompressHandler`, v1.5.2), and an error after the 200 becomes the body's last text.
"""

from __future__ import annotations

import asyncio
import socket
import time
import zlib
from collections.abc import Callable
from typing import Any, cast

import nomad
import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.hijack import WRITE_TIMEOUT_S, HijackedConnection
from nomad_gpu.devcluster.version import NomadVersion

from .conftest import CLUSTERS, ClusterFactory
from .helpers import StreamReader, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`

V2_HEAD = (b"HTTP/1.1 200 OK\r\nConnection: close\r\nCache-Control: no-cache\r\n"
           b"Content-Type: application/json\r\nVary: Accept-Encoding\r\n\r\n")
STREAM = "GET /v1/event/stream?topic=Job HTTP/1.1\r\nHost: nomad\r\nAccept-Encoding: {enc}\r\n\r\n"


class Raw:
    """A client socket that keeps every byte it read."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.data = b""

    def send(self, text: str) -> None:
        self.sock.sendall(text.encode())

    def read_until(self, done: Callable[[bytes], bool], timeout_s: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout_s
        while not done(self.data):
            assert time.monotonic() < deadline, f"timed out; read so far: {self.data!r}"
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.data += chunk
        return self.data

    def read_to_eof(self) -> bytes:
        return self.read_until(lambda _: False)

    def close(self) -> None:
        self.sock.close()


def head_and_body(data: bytes) -> tuple[bytes, bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", body


def dechunk(body: bytes) -> tuple[list[bytes], bool]:
    """The chunks of a chunked body, and whether its last chunk (size 0) arrived."""
    chunks: list[bytes] = []
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks, True
        chunks.append(rest[:size])
        assert rest[size:size + 2] == b"\r\n"
        body = rest[size + 2:]
    return chunks, False


def register(cluster: DevCluster, name: str) -> None:
    submit(nomad.Nomad(address=cluster.url, timeout=5), jobspec(name, duration=3600))


# ---- 2.0.5: hijacked, close-delimited ---------------------------------------------------------------------

def test_v2_head_is_nomads_own_and_the_body_is_close_delimited(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(nomad_version="2.0.5")
    raw = Raw(cluster.url)
    raw.send(STREAM.format(enc="gzip, deflate"))
    head, body = head_and_body(raw.read_until(lambda d: d.endswith(b"\r\n\r\n{}\n")))
    assert head == V2_HEAD  # no Transfer-Encoding, no Content-Length, no Content-Encoding, no Date
    assert body == b"{}\n"
    register(cluster, "framed")
    raw.read_until(lambda d: b'"JobRegistered"' in d and d.endswith(b"\n"))
    assert wait_until(lambda: cluster.drop_streams() == 1 or None)
    rest = raw.read_to_eof()  # the server's end of a stream is the close, and nothing else
    assert rest.endswith(b"}\n") and b"subscription closed" not in rest
    raw.close()


def test_v2_hijacks_a_kept_alive_connection(make_cluster: ClusterFactory) -> None:
    """A client's pool reuses the connection of an earlier request for the stream (the watcher's does)."""
    cluster = make_cluster(nomad_version="2.0.5")
    raw = Raw(cluster.url)
    raw.send("GET /v1/nodes HTTP/1.1\r\nHost: nomad\r\n\r\n")
    head, _ = head_and_body(raw.read_until(lambda d: b"\r\n\r\n" in d and d.endswith(b"]")))
    assert b"content-length" in head.lower() and b"connection: close" not in head.lower()
    raw.data = b""
    raw.send(STREAM.format(enc="identity"))
    assert head_and_body(raw.read_until(lambda d: b"{}\n" in d))[0] == V2_HEAD
    raw.close()


def test_v2_answers_a_http_1_0_request_in_its_own_protocol(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(nomad_version="2.0.5")
    raw = Raw(cluster.url)
    raw.send("GET /v1/event/stream HTTP/1.0\r\n\r\n")
    head, _ = head_and_body(raw.read_until(lambda d: b"{}\n" in d))
    # Go's Response.Write adds `Connection: close` only on HTTP/1.1 (ContentLength -1, not chunked)
    assert head == (b"HTTP/1.0 200 OK\r\nCache-Control: no-cache\r\nContent-Type: application/json\r\n"
                    b"Vary: Accept-Encoding\r\n\r\n")
    raw.close()


def test_v2_client_hang_up_ends_the_subscription(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(nomad_version="2.0.5")
    raw = Raw(cluster.url)
    raw.send(STREAM.format(enc="gzip"))
    raw.read_until(lambda d: b"{}\n" in d)
    wait_until(lambda: cluster.broker.subscriber_count == 1)
    raw.close()
    wait_until(lambda: cluster.broker.subscriber_count == 0, what="the server to notice the hang-up")


# ---- 1.10.5: chunked, gzipped when asked, late errors in the body -----------------------------------------

def test_v1_10_body_is_chunked_one_chunk_per_write(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(nomad_version="1.10.5")
    raw = Raw(cluster.url)
    raw.send(STREAM.format(enc="identity"))
    head, body = head_and_body(raw.read_until(lambda d: d.endswith(b"1\r\n\n\r\n")))
    lower = head.lower()
    assert lower.startswith(b"http/1.1 200 ok\r\n")
    assert b"transfer-encoding: chunked\r\n" in lower and b"content-length" not in lower
    assert b"connection: close" not in lower and b"content-encoding" not in lower
    assert b"cache-control: no-cache\r\n" in lower and b"content-type: application/json\r\n" in lower
    assert body == b"2\r\n{}\r\n1\r\n\n\r\n"  # the JSON and its newline: two flushed writes
    register(cluster, "chunked")
    raw.read_until(lambda d: b'"JobRegistered"' in d and d.endswith(b"1\r\n\n\r\n"))
    wait_until(lambda: cluster.drop_streams() == 1 or None)
    data = raw.read_until(lambda d: d.endswith(b"0\r\n\r\n"))
    chunks, ended = dechunk(head_and_body(data)[1])
    assert ended and chunks[-1] == b"subscription closed by server, client should resubscribe"
    # the body ended, the connection did not: it serves the next request
    raw.data = b""
    raw.send("GET /v1/status/leader HTTP/1.1\r\nHost: nomad\r\n\r\n")
    assert raw.read_until(lambda d: d.endswith(b'"127.0.0.1:4647"')).startswith(b"HTTP/1.1 200 OK")
    raw.close()


def test_v1_10_gzips_the_stream_and_flushes_each_write(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(nomad_version="1.10.5")
    raw = Raw(cluster.url)
    raw.send(STREAM.format(enc="gzip, deflate"))

    def decoded(data: bytes) -> bytes:
        chunks, _ = dechunk(head_and_body(data)[1]) if b"\r\n\r\n" in data else ([], False)
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b"".join(chunks))
        except zlib.error:
            return b""

    data = raw.read_until(lambda d: decoded(d) == b"{}\n")  # two writes, each flushed: nothing waits
    head = head_and_body(data)[0].lower()
    assert b"content-encoding: gzip\r\n" in head and b"vary: accept-encoding\r\n" in head
    chunks, _ = dechunk(head_and_body(data)[1])
    assert chunks[0][:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # Go's gzip header
    wait_until(lambda: cluster.drop_streams() == 1 or None)
    chunks, ended = dechunk(head_and_body(raw.read_until(lambda d: d.endswith(b"0\r\n\r\n")))[1])
    assert ended
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    text = decoder.decompress(b"".join(chunks))
    assert text == b"{}\nsubscription closed by server, client should resubscribe" and decoder.eof
    raw.close()


def test_v1_10_stream_read_by_a_client_ends_with_the_error_text(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(nomad_version="1.10.5")
    reader = StreamReader(cluster.url, [("topic", "Job")])
    assert reader.headers["Transfer-Encoding"] == "chunked" and reader.headers["Content-Encoding"] == "gzip"
    wait_until(lambda: reader.heartbeats == 1)
    cluster.drop_streams()
    assert reader.ended.wait(5)
    assert reader.trailer == b"subscription closed by server, client should resubscribe"
    reader.close()


# ---- every version ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["2.0.5", "1.10.5"])
def test_bad_parameters_and_methods_are_answered_before_the_stream(make_cluster: ClusterFactory,
                                                                  version: str) -> None:
    cluster = make_cluster(nomad_version=version)
    raw = Raw(cluster.url)
    raw.send("GET /v1/event/stream?index=x HTTP/1.1\r\nHost: nomad\r\nConnection: close\r\n\r\n")
    data = raw.read_to_eof()
    assert data.startswith(b"HTTP/1.1 400 ") and b"\r\n\r\nUnable to parse index: " in data
    raw.close()
    raw = Raw(cluster.url)
    raw.send("HEAD /v1/event/stream HTTP/1.1\r\nHost: nomad\r\nConnection: close\r\n\r\n")
    assert raw.read_to_eof().startswith(b"HTTP/1.1 405 ")
    raw.close()


@pytest.mark.parametrize("version", ["2.0.5", "1.10.5"])
def test_clients_gone_at_once_leave_no_subscription_behind(make_cluster: ClusterFactory, version: str) -> None:
    cluster = make_cluster(nomad_version=version)
    for _ in range(20):
        raw = Raw(cluster.url)
        raw.send(STREAM.format(enc="gzip"))
        raw.close()
    wait_until(lambda: cluster.broker.subscriber_count == 0, what="every subscription to end")


@pytest.mark.parametrize(("text", "hijacks"), [("2.0.5", True), ("v1.11.2", True), ("1.11.1", False),
                                               ("1.10.5", False), ("1.9.7", False)])
def test_versions_and_their_framing(text: str, hijacks: bool) -> None:
    assert NomadVersion.parse(text).hijacks_event_stream is hijacks


@pytest.mark.parametrize("text", ["2.1.0", "1.8.4", "2.0", "latest", ""])
def test_versions_not_modelled_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="Nomad version"):
        DevCluster(CLUSTERS / "seed-a800.yaml", nomad_version=text)


def test_default_is_the_latest_2_0() -> None:
    assert str(DevCluster(CLUSTERS / "seed-a800.yaml").nomad_version) == "2.0.5"


@pytest.mark.parametrize("command", ["dev-cluster", "dev", "demo"])
def test_cli_refuses_a_version_it_does_not_model_in_one_line(command: str) -> None:
    from click.testing import CliRunner

    from nomad_gpu.cli.main import main

    args = [command, "--nomad-version", "2.1.0"]
    if command == "dev-cluster":
        args += ["--cluster", str(CLUSTERS / "seed-a800.yaml"), "--port", "0"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: Nomad version 2.1.0 is not modelled: the dev cluster plays 1.9.0 to 2.0.x"]


class _Transport:
    """The little of asyncio.Transport a hijacked connection uses."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_a_client_that_does_not_read_is_cut_off_at_the_write_deadline() -> None:
    """Nomad sets a 40 s deadline on every write to the hijacked connection (event_endpoint.go, v2.0.5)."""
    assert WRITE_TIMEOUT_S == 40.0

    async def scenario() -> tuple[bool, bool, bool]:
        transport = _Transport()
        conn = HijackedConnection(cast(Any, transport), write_timeout_s=0.05)
        first = await conn.write(b"{}")
        conn.pause_writing()  # the client stopped reading and the buffers are full
        second = await conn.write(b"\n")
        return first, second, transport.closed and transport.written == [b"{}"]

    assert asyncio.run(scenario()) == (True, False, True)
