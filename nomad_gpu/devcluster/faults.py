"""Network faults between a client and the dev cluster: lost replies and whole outages.

A companion must survive what a real network does to Nomad's API: a register that Nomad applied but
whose reply never arrived (a reset connection, or a reply slower than the client's timeout), and a
Nomad that cannot be reached for a while. These faults live in front of the HTTP app (an ASGI
middleware), so every handler behind it stays a faithful model, and they are counted so that a test
can judge the client's behaviour from the cluster's side: how many requests it sent per second into
an outage, how many replies it lost.

- Outage: every `/v1/` request (event streams included) is taken over and reset (RST) without a
  byte of reply; open streams are cut when it begins. `/_dev/` stays reachable for the test itself.
- Lost replies: the next N registers (`POST`/`PUT /v1/jobs`, `/v1/job/:id`) are applied, then the
  connection is reset or closed without a reply, or the reply is held for `delay_s` first.

The connection is taken over with the `HIJACK` extension of the server's protocol (hijack.py); an
app served without it cannot fake a reset, and refuses with a 500 rather than answer normally.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from .hijack import HIJACK

logger = logging.getLogger(__name__)

LOSS_MODES = ("reset", "close", "delay")
_REGISTER_PATH = re.compile(r"^/v1/(jobs|job/[^/]+)$")
_KEPT_SECONDS = 3600  # per-second refusal counts kept (a bound on memory for long runs)

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Any], Any]
App = Callable[[Scope, Receive, Send], Any]


class Faults:
    """The fault plan and its counters; thread-safe (set from tests, read by the HTTP loop)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._unreachable_until = 0.0
        self._loss: list[tuple[str, float]] = []  # one (mode, delay) per reply still to lose
        self.requests = 0
        self.refused = 0
        self.replies_lost = 0
        self.outages: list[dict[str, float]] = []
        self._refused_by_second: dict[int, int] = {}
        self._refused_what: dict[int, dict[str, int]] = {}
        """Per second: the refused requests by method and path (IDs cut), to say who knocked in an outage."""

    def unreachable(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("an outage cannot last a negative time")
        with self._lock:
            start = self._clock()
            self._unreachable_until = max(self._unreachable_until, start + seconds)
            self.outages.append({"start": start, "end": self._unreachable_until})

    def reachable(self) -> None:
        """End an outage early."""
        with self._lock:
            now = self._clock()
            self._unreachable_until = 0.0
            for outage in self.outages:
                outage["end"] = min(outage["end"], now)

    def lose_replies(self, count: int, mode: str = "reset", delay_s: float = 0.0) -> None:
        if count < 0 or mode not in LOSS_MODES or delay_s < 0:
            raise ValueError(f"lose_replies needs count >= 0, mode in {LOSS_MODES}, delay_s >= 0")
        with self._lock:
            self._loss.extend([(mode, delay_s)] * count)

    def admit(self, what: str = "") -> bool:
        """Count one API request; False when it falls in an outage (and is counted as refused)."""
        with self._lock:
            self.requests += 1
            now = self._clock()
            if now >= self._unreachable_until:
                return True
            self.refused += 1
            second = int(now)
            self._refused_by_second[second] = self._refused_by_second.get(second, 0) + 1
            kinds = self._refused_what.setdefault(second, {})
            kinds[what] = kinds.get(what, 0) + 1
            for old in [s for s in self._refused_by_second if s <= second - _KEPT_SECONDS]:
                del self._refused_by_second[old]
                self._refused_what.pop(old, None)
            return False

    def take_loss(self) -> tuple[str, float] | None:
        with self._lock:
            if not self._loss:
                return None
            self.replies_lost += 1
            return self._loss.pop(0)

    @property
    def is_unreachable(self) -> bool:
        with self._lock:
            return self._clock() < self._unreachable_until

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests,
                "refused": self.refused,
                "refused_max_per_second": max(self._refused_by_second.values(), default=0),
                "refused_by_second": {str(s): n for s, n in sorted(self._refused_by_second.items())},
                "refused_what_by_second": {str(s): dict(w) for s, w in sorted(self._refused_what.items())},
                "outages": [dict(o) for o in self.outages],
                "unreachable": self._clock() < self._unreachable_until,
                "replies_lost": self.replies_lost,
                "replies_to_lose": len(self._loss),
            }


class FaultGate:
    """ASGI middleware applying a `Faults` plan to `/v1/` requests."""

    def __init__(self, app: App, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if not self.faults.admit(f"{scope['method']} {'/'.join(scope['path'].split('/')[:3])}"):
            await _reset(scope, send)
            return
        loss = None
        if scope["method"] in ("POST", "PUT") and _REGISTER_PATH.match(scope["path"]):
            loss = self.faults.take_loss()
        if loss is None:
            await self.app(scope, receive, send)
            return
        mode, delay_s = loss
        held: list[Any] = []

        async def hold(message: Any) -> None:
            held.append(message)

        await self.app(scope, receive, hold)  # Nomad applies the register...
        logger.info("dev cluster: losing the reply to %s %s (%s)", scope["method"], scope["path"], mode)
        if mode == "delay":  # ...and the reply arrives after the client stopped waiting
            await asyncio.sleep(delay_s)
            for message in held:
                await send(message)
        else:  # ...or never arrives
            await _reset(scope, send, abort=mode == "reset")


async def _reset(scope: Scope, send: Send, *, abort: bool = True) -> None:
    """Take the connection over and reset it (RST) or close it (FIN) without a reply."""
    hijack = (scope.get("extensions") or {}).get(HIJACK)
    if hijack is None:
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b"fault injection needs the hijacking protocol"})
        return
    conn = hijack()
    if abort:
        sock = conn.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:  # already gone: nothing left to reset
                pass
        conn.transport.abort()
    else:
        conn.close()
