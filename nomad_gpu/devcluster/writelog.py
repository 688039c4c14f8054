"""Every write the dev cluster received, and from whom: what the audit needs to judge that a replica which
lost the service's leader lease sent nothing more to Nomad.

Not a behaviour of Nomad (whose HTTP agent keeps no such log): an observation point of the dev cluster's own,
like the rest of `/_dev/audit`. A write is a request that changes Nomad's state: a register (`POST`/`PUT`
`/v1/jobs` or `/v1/job/<id>`), a deregister (`DELETE /v1/job/<id>`), an allocation stop
(`/v1/allocation/<id>/stop`); a parse (`/v1/jobs/parse`) and a plan are not. Each entry keeps the wall time it
arrived, the path, the caller's `User-Agent` (the service names its process there), the answer's status, and,
for a register, the job's `nomad_gpu_epoch` meta (the service leader's epoch). Requests refused before they
reach the app (the fault gate's cuts) are not here: they never reached Nomad.
"""

from __future__ import annotations

import json
import re
import threading
import time
import weakref
from collections import deque
from typing import Any

WRITE_PATHS = re.compile(r"^/v1/(jobs|job/[^/]+|allocation/[^/]+/stop)$")
KEPT = 100_000
"""Entries kept (the oldest dropped first): a long chaos run writes a few thousand."""


class WriteLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: deque[dict[str, Any]] = deque(maxlen=KEPT)

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._entries)


_LOGS: weakref.WeakKeyDictionary[Any, WriteLog] = weakref.WeakKeyDictionary()


def log_of(state: Any) -> WriteLog:
    """The write log of one cluster state (kept beside it, not in it: the state is the model of Nomad's)."""
    log = _LOGS.get(state)
    if log is None:
        log = _LOGS[state] = WriteLog()
    return log


def _epoch(body: bytes) -> str | None:
    try:
        job = json.loads(body).get("Job") or {}
        meta = job.get("Meta") or {}
    except (ValueError, AttributeError):
        return None
    value = meta.get("nomad_gpu_epoch") if isinstance(meta, dict) else None
    return str(value) if value is not None else None


class WriteRecorder:
    """ASGI middleware in front of the routes: records each write with its answer's status."""

    def __init__(self, app: Any, log: WriteLog) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        method = scope.get("method", "")
        if method in ("GET", "HEAD") or not WRITE_PATHS.match(path) or path == "/v1/jobs/parse":
            await self.app(scope, receive, send)
            return
        agent = next((v.decode(errors="replace") for k, v in scope.get("headers", []) if k == b"user-agent"), "")
        entry: dict[str, Any] = {"at": time.time(), "method": method, "path": path, "agent": agent, "status": None,
                                 "epoch": None}
        body = bytearray()

        async def receiving() -> Any:
            message = await receive()
            if message.get("type") == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    entry["epoch"] = _epoch(bytes(body))
            return message

        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.start":
                entry["status"] = message.get("status")
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        finally:
            self.log.add(entry)
