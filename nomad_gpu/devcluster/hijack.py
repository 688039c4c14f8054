"""Go's `http.Hijacker` for the dev cluster's HTTP server: an endpoint may take the connection over.

Nomad 1.11.2 and later write the event stream on a hijacked connection: their own `HTTP/1.1 200 OK`,
no `Content-Length`, no chunked encoding, and the body ends when the connection closes
(`command/agent/event_endpoint.go`, v2.0.5). uvicorn, like any HTTP/1.1 server, chunks every body
that has no length, so those bytes cannot be written through ASGI. This protocol is uvicorn's own h11
protocol plus one ASGI extension, `HIJACK`: calling it hands the transport to the endpoint, the way
uvicorn itself hands a connection to its WebSocket protocol after an upgrade. From then on uvicorn
writes nothing on the connection, keeps no timer for it and does not wait for it at shutdown; the
endpoint writes raw bytes and closes it.

The same protocol writes a response's head together with the start of its body, as Go's net/http
does (its `bufio.Writer` goes out when the handler flushes or returns): uvicorn writes the head on
its own, and that second `send` on every reply was the largest single cost of serving a request.

This leans on uvicorn's h11 protocol internals (`app`, `cycle`, `cycle.transport`, `connections`),
which is one reason uvicorn is pinned exactly; the dev cluster's framing tests read the raw socket and
fail if they move.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

HIJACK = "nomad_gpu.hijack"
"""The scope extension: a callable that takes the connection from uvicorn and returns it."""

WRITE_TIMEOUT_S = 40.0
"""Nomad's per-write deadline on the hijacked connection, 10 s above the heartbeat (event_endpoint.go)."""


class HijackedConnection(asyncio.Protocol):
    """A connection taken from uvicorn: raw writes under a write deadline, and notice of its end."""

    def __init__(self, transport: asyncio.Transport, write_timeout_s: float = WRITE_TIMEOUT_S) -> None:
        self.transport = transport
        self.write_timeout_s = write_timeout_s
        self.on_lost: Callable[[], None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._lost = False

    # -- asyncio.Protocol ----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        pass  # Nomad never reads from the connection once it has hijacked it

    def eof_received(self) -> bool:
        # The client hung up. Nomad notices at its next write (a heartbeat at the latest); ending the
        # subscription at once instead is invisible to any client and frees the stream sooner.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._writable.set()
        if self.on_lost is not None:
            self.on_lost()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- for the endpoint ----------------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self._lost or self.transport.is_closing()

    async def write(self, data: bytes) -> bool:
        """One write, as Nomad's `conn.Write`; False once the connection is gone or a write has
        waited past the deadline for a client that does not read (then the connection is closed)."""
        if not self._writable.is_set():
            try:
                await asyncio.wait_for(self._writable.wait(), self.write_timeout_s)
            except TimeoutError:
                logger.info("event stream: a write waited %g s for the client; closing", self.write_timeout_s)
                self.close()
                return False
        if self.lost:
            return False
        self.transport.write(data)
        return True

    def close(self) -> None:
        self.transport.close()


class HeadWithBody:
    """The transport as one request/response cycle sees it: the cycle's first write (the head) is
    held until its next write, which carries it, or until the loop's next turn, whichever is first;
    so a reply is one `send` and a streamed body's head is never held back."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._first = True

    def write(self, data: bytes) -> None:
        if self._first:
            self._first = False
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        self.transport.write(data)

    def flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if not self.transport.is_closing():
                self.transport.write(held)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.flush()
        self.transport.close()


class HijackingH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with `scope["extensions"][HIJACK]` on every HTTP request and the head
    of each response written with its body (`HeadWithBody`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        app = self.app

        async def with_hijacker(scope: Any, receive: Any, send: Any) -> None:
            scope["extensions"] = {**(scope.get("extensions") or {}), HIJACK: self._hijack}
            await app(scope, receive, send)

        self.app = with_hijacker

    def handle_events(self) -> None:
        super().handle_events()  # may start a new cycle, whose task has not run yet
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]

    def _hijack(self) -> HijackedConnection:
        cycle = self.cycle
        # the endpoint answers on its own: when it returns, uvicorn must not write a 500 or an end of body
        cycle.response_started = True
        cycle.response_complete = True
        self.connections.discard(self)
        conn = HijackedConnection(self.transport)
        self.transport.set_protocol(conn)
        if not self.transport.is_reading():
            self.transport.resume_reading()  # so that a hang-up is seen
        return conn
