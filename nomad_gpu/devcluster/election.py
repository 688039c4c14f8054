"""Leader elections: a window in which the servers have no leader, and what the API answers then.

A real cluster loses its leader (a server restart, a network blip between servers, an upgrade) and
takes a few seconds to elect another. Nomad v2.0.5 (and v1.10.5) answers during that window:

- every RPC that must reach the leader (every write, and every read without `?stale`) is held up to
  `RPCHoldTimeout` (5 s, nomad/config.go), re-checking for a leader every 0-312 ms
  (`RandomStagger(RPCHoldTimeout / JitterFraction)`, `getLeaderForRPC`, nomad/rpc.go); a leader elected
  meanwhile answers it as usual, otherwise it fails with `structs.ErrNoLeader`, "No cluster leader"
  (nomad/structs/errors.go), which the HTTP agent answers as a plain-text 500 (`errCodeFromHandler`,
  command/agent/http.go). `GET /v1/status/leader` is such a read (`Status.Leader` calls `forward`,
  nomad/status_endpoint.go): it answers `""` only with `?stale`;
- a `?stale` read (`forward` returns early for `IsRead() && AllowStaleRead()`) is answered from the
  server's own state with `X-Nomad-KnownLeader: false` and `X-Nomad-LastContact` growing
  (`setQueryMeta`, nomad/rpc.go); `?stale` with no value means true, a non-bool is a 400
  (`parseConsistency`, command/agent/http.go);
- not gated at all: the event stream (`Event.stream` forwards only to another region,
  nomad/event_endpoint.go), `/v1/jobs/parse` (parsed in the agent, `JobsParseRequest`,
  command/agent/job_endpoint.go), `/v1/client/` reads (`ClientAllocations.Stats` sets `AllowStale`;
  `FileSystem.logs` never forwards) and `/v1/agent/` (the agent's own serf view);
- nothing is committed: client updates (a task starting or ending) and the scheduler's plans wait
  for the new leader, so the event stream stays open and quiet. The dev cluster pauses its timer
  thread for the window (runner.py `hold_until`); what came due runs when the window ends, so a task
  that ended inside it is recorded as ended then (later, never earlier, than on the node).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from .runner import TimerHeap

RPC_HOLD_S = 5.0  # RPCHoldTimeout, nomad/config.go DefaultConfig, v2.0.5 and v1.10.5
_JITTER_FRACTION = 16  # structs.JitterFraction, nomad/structs/structs.go
NO_LEADER = "No cluster leader"  # structs.ErrNoLeader, nomad/structs/errors.go
_BAD_STALE = "Expect `true` or `false` for `stale` query string parameter"
_UNGATED = ("/v1/event/stream", "/v1/jobs/parse", "/v1/client/", "/v1/agent/")
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Any], Any]
App = Callable[[Scope, Receive, Send], Any]


class Election:
    """Election windows on the cluster's clock, and their counters; thread-safe."""

    def __init__(self, timers: TimerHeap, clock: Callable[[], float] = time.time) -> None:
        self._timers = timers
        self._clock = clock
        self._lock = threading.Lock()
        self._until = 0.0  # no leader while clock() < _until (math.inf: until `end`)
        self._since = 0.0
        self.windows: list[dict[str, float | None]] = []
        self.refused = 0  # requests answered 500 "No cluster leader"
        self.held = 0  # requests held, then answered by a new leader
        self.stale = 0  # stale reads answered without a leader

    def begin(self, seconds: float | None = None) -> None:
        """No leader for `seconds` of the cluster's clock (None: until `end`)."""
        if seconds is not None and not seconds > 0:
            raise ValueError("an election lasts a positive number of seconds")
        with self._lock:
            now = self._clock()
            if now >= self._until:
                self._since = now
                self.windows.append({"start": now, "end": None})
            self._until = math.inf if seconds is None else max(self._until, now + seconds)
            if self._until != math.inf:
                self.windows[-1]["end"] = self._until
            self._timers.hold_until(self._until)

    def end(self) -> None:
        """A leader is elected now."""
        with self._lock:
            now = self._clock()
            if now < self._until:
                self.windows[-1]["end"] = now
            self._until = 0.0
            self._timers.hold_until(0.0)

    @property
    def has_leader(self) -> bool:
        with self._lock:
            return self._clock() >= self._until

    def last_contact_ms(self) -> int:
        with self._lock:
            return 0 if self._clock() >= self._until else int((self._clock() - self._since) * 1000)

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"leader": self._clock() >= self._until, "windows": [dict(w) for w in self.windows],
                    "refused": self.refused, "held": self.held, "stale_reads": self.stale}


def _stale(scope: Scope) -> bool | None:
    """`?stale` as `parseConsistency` reads it: absent False, empty True, a bool, or None for a 400."""
    pairs = [p.split("=", 1) for p in scope.get("query_string", b"").decode("latin-1").split("&") if p]
    values = [kv[1] if len(kv) > 1 else "" for kv in pairs if kv[0] == "stale"]
    if not values:
        return False
    if values[0] == "" or values[0] in _TRUE:
        return True
    return False if values[0] in _FALSE else None


class LeaderGate:
    """ASGI middleware: the API as a server without a leader answers it (module docstring)."""

    def __init__(self, app: App, election: Election, hold_s: float = RPC_HOLD_S) -> None:
        self.app = app
        self.election = election
        self.hold_s = hold_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] != "http" or not path.startswith("/v1/") or path.startswith(_UNGATED)
                or self.election.has_leader):
            await self.app(scope, receive, send)
            return
        stale = scope["method"] == "GET" and _stale(scope)
        if stale is None:
            await _plain(send, 400, _BAD_STALE)
            return
        if stale:
            self.election.count("stale")
            await self.app(scope, receive, self._follower_meta(send))
            return
        deadline = time.monotonic() + self.hold_s  # RPCHoldTimeout runs on the server's own clock
        while not self.election.has_leader and time.monotonic() < deadline:
            stagger = random.uniform(0, self.hold_s / _JITTER_FRACTION)
            await asyncio.sleep(max(0.0, min(stagger, deadline - time.monotonic())))
        if not self.election.has_leader:
            self.election.count("refused")
            await _plain(send, 500, NO_LEADER)
            return
        self.election.count("held")
        await self.app(scope, receive, send)

    def _follower_meta(self, send: Send) -> Send:
        """A follower's QueryMeta: no known leader, the time since it last heard from one."""
        async def rewrite(message: Any) -> None:
            if message["type"] == "http.response.start":
                meta = {b"x-nomad-knownleader": b"false",
                        b"x-nomad-lastcontact": str(self.election.last_contact_ms()).encode()}
                headers = [(k, meta.get(k.lower(), v)) for k, v in message.get("headers", [])]
                message = {**message, "headers": headers}
            await send(message)
        return rewrite


async def _plain(send: Send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text.encode()})
