"""Connections that never finish a request must not shut the API for everyone.

Uvicorn (0.54) arms no timer until a first answer is sent, and any byte cancels its keep-alive timer:
a connection that sends nothing, or one header byte a second, stays open for ever. Enough of them use up
the file descriptors; ``accept`` then fails on every loop turn (and asyncio logs each failure), and
``/v1/status`` times out. Its ``limit_concurrency`` answers 503 only once a request head is complete,
which an idle connection never sends. So the HTTP protocol here adds, per connection:

* a head deadline: a request's head must be complete ``head_timeout_s`` after the connection opened or
  after its previous answer (a byte at a time does not extend it); then 408 and close;
* a body deadline: its body complete ``body_timeout_s`` after the head; then close;
* a cap on open connections, under half of what the file-descriptor limit leaves: at the cap, a new
  connection closes the one that has waited longest without sending a request (an idle or slow one),
  so a client with a request is served; only when every connection is mid-request is it refused (503).

The deadlines run on the event loop's monotonic clock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from nomad_gpu.service.limits import HttpLimits

logger = logging.getLogger(__name__)

RESERVED_FDS = 64
"""File descriptors kept for the database, Nomad's connections and the thread pool."""


def _raw_answer(status: str, message: str, extra: bytes = b"") -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written outside h11 (no request was parsed)."""
    body = b'{"error": "' + message.encode() + b'"}'
    return (b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: application/json\r\nconnection: close\r\n" + extra
            + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


_TIMED_OUT = _raw_answer("408 Request Timeout", "the request took too long to send")
_FULL = _raw_answer("503 Service Unavailable", "too many open connections", b"retry-after: 1\r\n")
_WAITING = (h11.IDLE,)
_ENDED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)


def _descriptor_room() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else max(48, soft - RESERVED_FDS)


def connection_cap(limits: HttpLimits) -> int:
    """The configured cap, lowered to half of what the file-descriptor limit leaves after RESERVED_FDS."""
    room = _descriptor_room()
    if room is None or limits.max_connections <= room // 2:
        return limits.max_connections
    logger.info("at most %d open connections (max_connections %d; the file-descriptor limit leaves %d)",
                room // 2, limits.max_connections, room)
    return room // 2


def accept_backlog() -> int:
    """The listen backlog, which is also how many connections asyncio accepts in one turn of its loop before
    any is looked at: a third of the descriptor room, so the cap's half and one burst always fit."""
    room = _descriptor_room()
    return 2048 if room is None else max(16, min(2048, room // 3))


def keep_alive_seconds(limits: HttpLimits) -> int:
    """Uvicorn's keep-alive timer takes whole seconds (at least 1)."""
    return max(1, math.ceil(limits.keep_alive_s))


def limited_protocol(limits: HttpLimits, cap: int) -> type[H11Protocol]:
    """The HTTP/1.1 protocol class for uvicorn's ``http=``, with these deadlines and this cap."""

    class Limited(LimitedH11Protocol):
        LIMITS = limits
        CAP = cap

    return Limited


class LimitedH11Protocol(H11Protocol):
    LIMITS: ClassVar[HttpLimits] = HttpLimits()
    CAP: ClassVar[int] = HttpLimits().max_connections

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""
        self.waiting_since: float | None = None
        """When this connection began waiting for a request head; None while a request is in progress."""

    # ---- uvicorn's hooks ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._open_count() > self.CAP and not self._evict_oldest_waiting():
            transport.write(_FULL)
            transport.close()
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.conn.their_state in _WAITING:
            self._await_head()
        else:
            self._follow()  # a pipelined request was read meanwhile

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.waiting_since = None
        super().connection_lost(exc)

    # ---- deadlines ---------------------------------------------------------------------------
    def _await_head(self) -> None:
        self.waiting_since = self.loop.time()
        self._arm("head", self.LIMITS.head_timeout_s)

    def _follow(self) -> None:
        """Move the deadline along with the request: head -> body -> none while the app answers."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self.waiting_since = None
            if self._phase != "body":
                self._arm("body", self.LIMITS.body_timeout_s)
        elif state in _ENDED:
            self.waiting_since = None
            self._disarm()

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, ""

    def _expired(self) -> None:
        phase, self._deadline, self._phase = self._phase, None, ""
        if self.transport.is_closing():
            return
        if phase == "head" and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(_TIMED_OUT)
        self.transport.close()  # mid-body: the app's receive() sees a disconnect

    # ---- the cap -----------------------------------------------------------------------------
    def _open_count(self) -> int:
        return sum(1 for c in self.connections if not c.transport.is_closing())

    def _evict_oldest_waiting(self) -> bool:
        """Close the connection that has waited longest without a request; False when none is waiting."""
        oldest: LimitedH11Protocol | None = None
        for c in self.connections:
            if c is self or not isinstance(c, LimitedH11Protocol) or c.waiting_since is None:
                continue
            if c.transport.is_closing():
                continue
            if oldest is None or c.waiting_since < (oldest.waiting_since or 0.0):
                oldest = c
        if oldest is None:
            return False
        oldest._disarm()
        oldest.waiting_since = None
        oldest.transport.close()
        return True
