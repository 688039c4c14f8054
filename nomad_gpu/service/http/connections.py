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
  connection closes one that has waited longest without sending a request (an idle or slow one),
  so a client with a request is served; only when every connection is mid-request is it refused (503).

Connections that never read their answers (issue 31): 1,000 of them, each sending 200 ``GET /ui/app.js`` at
once, held every slot, since a connection with an answer in progress had no deadline and was never closed.
So, also:

* a write deadline: the transport's buffer limits are (almost) 0, so it pauses the protocol whenever the
  kernel did not take all that was written and resumes it only once all of it is taken; paused ``write_timeout_s``,
  the connection is reset (RST: the kernel drops what it holds for it too). This also bounds a close that
  waits to flush (a 408, an answer with ``connection: close``);
* a connection whose writes are blocked may be closed to make room, like one waiting for a request head;
* pipelining: a run of requests each already received when the answer before it was complete counts as
  sent ahead; the ``max_pipelined``-th of a run, with more behind it, is answered with ``connection: close``
  and the connection is closed after it, leaving the rest unanswered (RFC 9112 9.3.2: the client sends
  them again). Bytes still in the kernel (reading is paused during an answer) are not seen, and do not count;
* a reserve: untrusted requests (:mod:`nomad_gpu.service.http.connroom`) may hold at most ``cap - reserve``
  connections; past it, one of theirs that may give way is closed, or the request is answered 503 and its
  connection closed. A connection is judged by its latest request head, a new one first by the head already
  waiting in its socket (peeked at, left for the transport), so one that has sent no head yet is let in (at
  the cap, by closing another) and a trusted one in a burst of new connections is not the one closed.

The deadlines run on the event loop's monotonic clock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import socket
import struct
from collections.abc import Collection
from contextlib import suppress
from typing import Any, ClassVar

import h11
from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from nomad_gpu.service.config.limits import HttpLimits
from nomad_gpu.service.http.connroom import (
    UNTRUSTED_ONLY,
    Standing,
    Trust,
    head_fields,
    pick_eviction,
    reserve_for,
    room_for,
    token_digests,
    trust_of,
    untrusted_fits,
)

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
_KEPT_FOR_TOKENS = _raw_answer("503 Service Unavailable", "too many open connections (the rest are kept for requests "
                               "with a token)", b"retry-after: 1\r\n")
_KEPT_FOR_CLIENTS = _raw_answer("503 Service Unavailable", "too many open connections (the rest are kept for requests "
                                "with X-Nomad-Gpu-Client)", b"retry-after: 1\r\n")
_WAITING = (h11.IDLE,)
_ENDED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)
PEEK_BYTES = 8192
"""How much of a new connection's first bytes is looked at for its head."""
_RESET = struct.pack("ii", 1, 0)
"""SO_LINGER on, 0 s: close() resets the connection and the kernel drops what it still holds for it."""


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


def limited_protocol(limits: HttpLimits, cap: int, tokens: Collection[str] = ()) -> type[LimitedH11Protocol]:
    """The HTTP/1.1 protocol class for uvicorn's ``http=``, with these deadlines, this cap and a reserve for
    requests that carry one of ``tokens`` (or ``X-Nomad-Gpu-Client`` when there are none)."""

    class Limited(LimitedH11Protocol):
        LIMITS = limits
        CAP = cap
        RESERVE = reserve_for(limits, cap)
        DIGESTS = token_digests(tokens)
        UNTRUSTED = set()
        REFUSAL = _KEPT_FOR_TOKENS if tokens else _KEPT_FOR_CLIENTS

    return Limited


class LimitedH11Protocol(H11Protocol):
    LIMITS: ClassVar[HttpLimits] = HttpLimits()
    CAP: ClassVar[int] = HttpLimits().max_connections
    RESERVE: ClassVar[int] = HttpLimits().reserved
    DIGESTS: ClassVar[frozenset[bytes]] = frozenset()
    UNTRUSTED: ClassVar[set[LimitedH11Protocol]] = set()
    """This server's connections whose latest request was untrusted (shared by its connections)."""
    REFUSAL: ClassVar[bytes] = _KEPT_FOR_CLIENTS
    """The answer to an untrusted request that finds no room outside the reserve."""

    @classmethod
    def retrust(cls, tokens: Collection[str]) -> None:
        """The reserve's tokens after a config reload (`ApiServer.retrust`)."""
        cls.DIGESTS = token_digests(tokens)
        cls.REFUSAL = _KEPT_FOR_TOKENS if tokens else _KEPT_FOR_CLIENTS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""
        self._write_deadline: asyncio.TimerHandle | None = None
        self.waiting_since: float | None = None
        """When this connection began waiting for a request head; None while a request is in progress."""
        self.blocked_since: float | None = None
        """When its writes were blocked (the kernel took not all of an answer); None while they flow."""
        self.trust = Trust.FRESH
        self._run = 0
        """Requests of the current run sent ahead (see the module docstring)."""
        self._ahead = False
        """Whether the next request was already received when the last answer was complete."""
        self._judged: object = None
        """The request cycle whose head was judged last."""
        self._closes_run = False
        """Whether the request being answered is the last of a run sent ahead that is allowed."""
        self._inner_app = self.app
        self.app = self._admit

    # ---- uvicorn's hooks ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # paused while anything is left that the kernel did not take (asyncio's socket transport pauses above
        # `high`, its TLS transport at `high` and above: 1 is "not empty" for both), resumed once all of it is
        transport.set_write_buffer_limits(high=1, low=0)
        self.trust = self._peeked_trust()
        if self._open_count() > self.CAP and not self._make_room(room_for(self.trust)):
            sock = transport.get_extra_info("socket")
            if sock is not None and self.scheme == "http":
                # a close with unread bytes is a reset, which the client may see before the answer
                waiting_bytes(sock.fileno(), PEEK_BYTES, peek=False)
            transport.write(_FULL)
            transport.close()
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        self._ahead = bool(self.conn.trailing_data[0])
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.conn.their_state in _WAITING:
            self._await_head()
        else:
            self._follow()  # a pipelined request was read meanwhile

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._unblocked()
        self.waiting_since = None
        self.UNTRUSTED.discard(self)
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_deadline is None:
            self.blocked_since = self.loop.time()
            self._write_deadline = self.loop.call_later(self.LIMITS.write_timeout_s, self._unread)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._unblocked()

    # ---- each request: the reserve and pipelining ---------------------------------------------
    def _judge(self) -> None:
        """A request head was just read (its app task is created, not yet run): its trust and the reserve,
        decided at once so that a burst of heads read in one turn of the loop cannot overrun the reserve;
        and whether its answer ends a run sent ahead."""
        self._judged = self.cycle
        self._run = self._run + 1 if self._ahead else 1
        self._ahead = False
        self.trust = trust_of(self.headers or (), self.DIGESTS)
        if self.trust is not Trust.UNTRUSTED:
            self.UNTRUSTED.discard(self)
        else:
            self.UNTRUSTED.add(self)
            if not untrusted_fits(len(self.UNTRUSTED), self.CAP, self.RESERVE) and not self._make_room(UNTRUSTED_ONLY):
                self.UNTRUSTED.discard(self)
                self.cycle.disconnected = True  # its app task does nothing (_admit)
                self.waiting_since = None
                self._disarm()
                self.transport.write(self.REFUSAL)
                self.transport.close()
                return
        self._closes_run = self._run >= self.LIMITS.max_pipelined and bool(self.conn.trailing_data[0])

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app this connection runs each request through: nothing for one refused by :meth:`_judge`,
        ``connection: close`` on the last answer of a run sent ahead."""
        if self.cycle.disconnected:
            return
        await self._inner_app(scope, receive, _closing(send) if self._closes_run else send)

    # ---- deadlines ---------------------------------------------------------------------------
    def _await_head(self) -> None:
        self.waiting_since = self.loop.time()
        self._arm("head", self.LIMITS.head_timeout_s)

    def _follow(self) -> None:
        """Move the deadline along with the request: head -> body -> none while the app answers."""
        if self.cycle is not None and self.cycle is not self._judged:
            self._judge()
            if self.transport.is_closing():
                return
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

    def _unblocked(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
        self._write_deadline, self.blocked_since = None, None

    def _unread(self) -> None:
        self._write_deadline = None
        logger.debug("closing a connection whose answer was not read for %.0f s", self.LIMITS.write_timeout_s)
        self._reset()

    def _reset(self) -> None:
        """Close at once, dropping what the client has not read (a plain close would wait to send it)."""
        self._unblocked()
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self.transport.abort()

    # ---- the cap -----------------------------------------------------------------------------
    def _holds_descriptor(self) -> bool:
        """Open, or closing but still waiting to send what the client does not read."""
        return not self.transport.is_closing() or self.blocked_since is not None

    def _open_count(self) -> int:
        return sum(1 for c in self.connections if not isinstance(c, LimitedH11Protocol) or c._holds_descriptor())

    def _make_room(self, within: frozenset[Trust]) -> bool:
        """Close the connection of ``within`` that gives way first (:func:`pick_eviction`); False when none may."""
        victim = pick_eviction(((c, c._standing()) for c in self.connections
                                if c is not self and isinstance(c, LimitedH11Protocol) and c._holds_descriptor()),
                               within)
        if victim is None:
            return False
        victim._give_way()
        return True

    def _standing(self) -> Standing:
        return Standing(self.trust, self.waiting_since, self.blocked_since)

    def _peeked_trust(self) -> Trust:
        """The trust of the head already waiting in the socket (left there for the transport to read); FRESH
        when there is no whole one yet, or under TLS, where the bytes are not the head."""
        sock = self.transport.get_extra_info("socket")
        if self.scheme != "http" or sock is None:
            return Trust.FRESH
        fields = head_fields(waiting_bytes(sock.fileno()))
        return Trust.FRESH if fields is None else trust_of(fields, self.DIGESTS)

    def _give_way(self) -> None:
        self._disarm()
        self.waiting_since = None
        self.UNTRUSTED.discard(self)
        if self.blocked_since is not None:
            self._reset()
        else:
            self.transport.close()


def waiting_bytes(fd: int, size: int = PEEK_BYTES, *, peek: bool = True) -> bytes:
    """Up to ``size`` bytes waiting in socket ``fd``, left there (``peek``) or taken; b"" when none or on any
    error. (asyncio's transport socket has no ``recv``: a socket object on the same descriptor, detached.)"""
    try:
        raw = socket.socket(fileno=fd)
    except OSError:
        return b""
    try:
        return raw.recv(size, (socket.MSG_PEEK if peek else 0) | socket.MSG_DONTWAIT)
    except OSError:
        return b""
    finally:
        raw.detach()


def _closing(send: Send) -> Send:
    """``send`` with ``connection: close`` added to the answer's head: h11 then closes after the answer."""

    async def closing_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return closing_send
