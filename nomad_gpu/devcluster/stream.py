"""`GET /v1/event/stream`: NDJSON frames from the broker, framed the way the Nomad version in play frames them.

Separate from the rest of the HTTP app because it is the one long-lived response, the one whose timing
is measured (handoff latency), and the one whose bytes changed under clients in Nomad 1.11.2.

Common to every version (`command/agent/event_endpoint.go`, `nomad/stream/ndjson.go`, v1.10.5 to
v2.0.5): a bad `index` or `topic` is a plain-text 400 before anything else; `{}` as soon as the client
connects and then on a ticker every `heartbeat_s` (30 in Nomad, not reset by data); one
`{"Index":n,"Events":[...]}` per raft index, and each frame goes out as two flushed writes, the JSON and
then "\n".

1.11.2 and later (`command/agent/event_endpoint.go`, v1.11.2, v2.0.5): the handler hijacks the
connection and writes the head with Go's `http.Response.Write` (status line in the request's protocol;
`ContentLength: -1` without chunking on HTTP/1.1 adds `Connection: close`; then the header map, sorted).
The map holds what the handler set plus `Vary: Accept-Encoding`, which gorilla/handlers'
`CompressHandler` (v1.5.2, around every route in `command/agent/http.go`) adds to every response; the
handler drops the `Content-Encoding` that wrapper would add and writes uncompressed. So the bytes are:

    HTTP/1.1 200 OK\\r\\nConnection: close\\r\\nCache-Control: no-cache\\r\\n
    Content-Type: application/json\\r\\nVary: Accept-Encoding\\r\\n\\r\\n

and then the frames; the body ends when the connection closes, and an error after the 200 (the
subscription closed by the server) is that close and nothing else. Where the response writer cannot
be hijacked Nomad falls back to the chunked writer, and so does the dev cluster (Starlette's test
client, say).

1.11.1 and earlier (same file, v1.11.1; v1.10.5 is the same): net/http's chunked body, one chunk per
flushed write (uvicorn writes each ASGI body message as one chunk); compressed when `Accept-Encoding`
names gzip or deflate (the first of the two, matched exactly, as `CompressHandler` does), each write
sync-flushed so that nothing waits. An error after the 200 goes through the agent's `wrap`
(`command/agent/http.go`): its `WriteHeader` is superfluous and its message becomes the last bytes of
the body, with no newline, before the end of the chunked body. Header order and the compressed bytes
are uvicorn's and zlib's; the framing and the content are Nomad's.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse

from .acl import Acl
from .events import EventBroker, StreamRequestError, Subscription, parse_index, parse_topics
from .hijack import HIJACK, HijackedConnection
from .version import NomadVersion

HEARTBEAT = b"{}"
NEWLINE = b"\n"
SUBSCRIPTION_CLOSED = b"subscription closed by server, client should resubscribe"
"""`stream.ErrSubscriptionClosed` (nomad/stream/subscription.go): what a dropped stream ends with."""

_GO_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # Go's compress/gzip: no mtime, OS unknown


class EventStreamEndpoint:
    """The ASGI app for the route; `heartbeat_s` is 30 in Nomad."""

    def __init__(self, broker: EventBroker, heartbeat_s: float, version: NomadVersion,
                 expand: Callable[[str], frozenset[str]] | None = None, acl: Acl | None = None) -> None:
        if heartbeat_s <= 0:
            raise ValueError("heartbeat_s must be positive")
        self.broker = broker
        self.expand = expand or (lambda namespace: frozenset({namespace}))
        """`*` to the namespaces that exist when the stream subscribes (namespaces.py `expand`)."""
        self.acl = acl or Acl()
        self.heartbeat_s = heartbeat_s
        self.version = version

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        if request.method != "GET":
            await PlainTextResponse("Invalid method", status_code=405)(scope, receive, send)
            return
        try:
            topics = parse_topics(request.query_params.getlist("topic"))
            index = parse_index(request.query_params.get("index"))
        except StreamRequestError as exc:
            await PlainTextResponse(str(exc), status_code=400)(scope, receive, send)
            return
        namespace = self.expand(request.query_params.get("namespace") or "default")
        hijack: Callable[[], HijackedConnection] | None = (scope.get("extensions") or {}).get(HIJACK)
        if self.acl.enabled and not self.acl.stream_allowed(request.headers.get("x-nomad-token"), topics, namespace):
            # `Event.stream` answers ErrPermissionDenied (403) before it subscribes (nomad/event_endpoint.go,
            # v2.0.5). From 1.11.2 the agent wrote `200 OK` on the hijacked connection first, so the refusal is
            # a close with no byte of body, not even the first heartbeat (command/agent/event_endpoint.go
            # `EventStream`); before, nothing was written yet and the agent answers 403.
            if self.version.hijacks_event_stream and hijack is not None:
                conn = hijack()
                await conn.write(hijacked_head(str(scope.get("http_version") or "1.1")))
                conn.close()
                return
            await PlainTextResponse("Permission denied", status_code=403)(scope, receive, send)
            return
        if self.version.hijacks_event_stream and hijack is not None:
            await self._hijacked(hijack(), str(scope.get("http_version") or "1.1"), topics, namespace, index)
            return
        subscription, backlog = self.broker.subscribe(topics, namespace, index, asyncio.get_running_loop())
        encoding = _compression(request.headers.get("accept-encoding", ""))
        headers = {"Cache-Control": "no-cache", "Content-Type": "application/json", "Vary": "Accept-Encoding"}
        if encoding:
            headers["Content-Encoding"] = encoding
        body = _chunked_body(self._writes(subscription, backlog), encoding)
        try:
            await StreamingResponse(body, headers=headers)(scope, receive, send)
        finally:  # a client gone before the body started never runs the generator's own cleanup
            self.broker.unsubscribe(subscription)

    async def _hijacked(self, conn: HijackedConnection, http_version: str, topics: dict[str, frozenset[str]],
                        namespace: frozenset[str], index: int) -> None:
        if not await conn.write(hijacked_head(http_version)):
            conn.close()
            return
        subscription, backlog = self.broker.subscribe(topics, namespace, index, asyncio.get_running_loop())
        conn.on_lost = lambda: subscription.queue.put_nowait(None)  # called on the loop's thread
        try:
            async for data in self._writes(subscription, backlog):
                if not await conn.write(data):
                    return
            # dropped by the server: from 1.11.2 a late error is the close, and nothing else
        finally:
            self.broker.unsubscribe(subscription)
            conn.close()

    async def _writes(self, subscription: Subscription, backlog: list[bytes]) -> AsyncIterator[bytes]:
        """Nomad's writes, in order: each frame's JSON, then its newline. Ends when the stream is dropped."""
        loop = asyncio.get_running_loop()
        try:
            yield HEARTBEAT
            yield NEWLINE
            for frame in backlog:
                yield frame.rstrip(NEWLINE)
                yield NEWLINE
            next_heartbeat = loop.time() + self.heartbeat_s
            while True:
                timeout = next_heartbeat - loop.time()
                if timeout <= 0:
                    next_heartbeat += self.heartbeat_s
                    yield HEARTBEAT
                    yield NEWLINE
                    continue
                if subscription.queue.empty():
                    try:
                        data = await asyncio.wait_for(subscription.queue.get(), timeout)
                    except TimeoutError:
                        continue
                else:  # no wait, so no timer and no task for wait_for to build and cancel
                    data = subscription.queue.get_nowait()
                if data is None:  # dropped by fault injection, server stop, or the client's hang-up
                    return
                yield data.rstrip(NEWLINE)
                yield NEWLINE
        finally:
            self.broker.unsubscribe(subscription)


def hijacked_head(http_version: str) -> bytes:
    """The head Go's `http.Response.Write` puts on the hijacked connection (see the module docstring)."""
    close = b"Connection: close\r\n" if http_version not in ("1.0", "0.9") else b""
    return (f"HTTP/{http_version} 200 OK\r\n".encode() + close + b"Cache-Control: no-cache\r\n"
            b"Content-Type: application/json\r\nVary: Accept-Encoding\r\n\r\n")


def _compression(accept_encoding: str) -> str:
    """gorilla/handlers `CompressHandler` (v1.5.2): the first token that is exactly gzip or deflate."""
    for token in accept_encoding.split(","):
        token = token.strip()
        if token in ("gzip", "deflate"):
            return token
    return ""


async def _chunked_body(writes: AsyncIterator[bytes], encoding: str) -> AsyncIterator[bytes]:
    """Each write becomes one chunk (compressed and sync-flushed when asked); a drop ends the body with
    Nomad's error text, as the agent writes it after the 200."""
    if not encoding:
        async for data in writes:
            yield data
        yield SUBSCRIPTION_CLOSED
        return
    # Go's compress/flate (gzip: with its own 10-byte header, CRC-32 and size) is a raw deflate stream
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc, size = 0, 0
    head = _GO_GZIP_HEADER if encoding == "gzip" else b""
    async for data in writes:
        crc, size = zlib.crc32(data, crc), size + len(data)
        yield head + deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH)
        head = b""
    crc, size = zlib.crc32(SUBSCRIPTION_CLOSED, crc), size + len(SUBSCRIPTION_CLOSED)
    tail = deflate.compress(SUBSCRIPTION_CLOSED) + deflate.flush(zlib.Z_FINISH)
    if encoding == "gzip":
        tail += struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)
    yield head + tail
