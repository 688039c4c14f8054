"""`GET /v1/client/fs/logs/:alloc_id`: a task's stdout and stderr, as a Nomad client serves them.

`nomad-gpu logs` reads a job's output through this API, so the dev cluster writes a few lines per
task: what it was given (node, devices), its progress at each quarter of its run, and how it ended.
The text at any moment is what the task would have written by then, so a log only ever grows and
an offset read later continues where an earlier one stopped.

Modelled on Nomad v2.0.5:
- parameters and their errors (`command/agent/fs_endpoint.go` Logs): `task` required ("must provide
  task name"), `type` stdout|stderr ("must provide log type (stdout/stderr)"), `follow` and `plain`
  parsed as Go booleans, `offset` an integer, `origin` start|end ("origin must be start or end"),
  every one a 400 with a plain-text body;
- the client's checks (`client/fs_endpoint.go` logs): an allocation the client does not hold is a 404
  `Unknown allocation "<id>"`; a task the allocation lacks is a 400 `unknown task name "<task>"`; a task
  that has not started is a 404 `task "<task>" not started yet. No logs available`;
- the offset (`client/fs_endpoint.go` logsImpl, findClosest): from `origin=start` it counts forward and
  stops at the end of the log; from `origin=end` it counts back and stops at the start;
- the body: with `plain=true` the bytes themselves (`Content-Type: text/plain`); otherwise JSON stream
  frames `{"Offset", "Data" (base64), "File"}` back to back (`client/lib/streamframer/framer.go`
  StreamFrame), `application/json`; without `follow` it ends at the end of the log, with `follow`
  it stays open, sends what the task writes next, and in JSON mode a `{}` heartbeat each second
  (`streamHeartbeatRate`), until the caller hangs up, whether or not the task has ended.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .allocs import Alloc, ClientStatus
from .queries import BadRequest
from .records import NotFound
from .state import ClusterState

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
STEPS = 4
POLL_S = 0.2
"""`streamBatchWindow` (client/fs_endpoint.go): how often a followed log is looked at again."""
HEARTBEAT_S = 1.0


class TaskNotStarted(NotFound):
    """A 404 the client answers before any byte of the log: the task has not started."""


def _go_bool(request: Request, name: str) -> bool:
    value = request.query_params.get(name)
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadRequest(f'failed to parse {name} field to boolean: strconv.ParseBool: parsing "{value}": invalid syntax')


def log_lines(alloc: Alloc, task: str, log_type: str, now: float, speed: float) -> list[tuple[float, str]]:
    """(time written, line) for every line the task has written by ``now``."""
    if alloc.started_at is None:
        return []
    start = alloc.started_at
    end = alloc.finished_at if alloc.finished_at is not None else start + alloc.duration_s / speed
    ids = ",".join(i for c in alloc.devices if c.task == task for i in c.ids)
    lines: list[tuple[float, str]] = []
    if log_type == "stdout":
        lines.append((start, f"{task}: started on {alloc.node_name} ({alloc.job_id}, allocation {alloc.id[:8]})"))
        lines.append((start, f"{task}: NVIDIA_VISIBLE_DEVICES={ids or 'none'}"))
        for k in range(1, STEPS + 1):
            at = start + (end - start) * k / STEPS
            if alloc.finished_at is not None and at >= alloc.finished_at and k == STEPS:
                break
            lines.append((at, f"{task}: step {k}/{STEPS} ({100 * k // STEPS}%)"))
        if alloc.client_status is ClientStatus.COMPLETE:
            lines.append((end, f"{task}: done, exit code 0"))
    elif alloc.client_status is ClientStatus.FAILED and alloc.finished_at is not None:
        lines.append((alloc.finished_at, f"{task}: error: the task failed, exit code 1"))
    return [(at, line) for at, line in lines if at <= now]


def log_text(state: ClusterState, alloc_id: str, task: str, log_type: str) -> bytes:
    """The whole log as written by now; raises NotFound, BadRequest or TaskNotStarted as the client would."""
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is None:
            raise NotFound(f'Unknown allocation "{alloc_id}"')
        if task not in {t.name for t in alloc.tasks}:
            raise BadRequest(f'unknown task name "{task}"')
        if alloc.started_at is None:
            raise TaskNotStarted(f'task "{task}" not started yet. No logs available')
        lines = log_lines(alloc, task, log_type, state.clock(), state.speed)
    return "".join(f"{line}\n" for _, line in lines).encode()


def _start(size: int, offset: int, origin: str) -> int:
    if origin == "end":
        return max(size - offset, 0) if offset >= 0 else size
    return min(max(offset, 0), size)


async def fs_logs(state: ClusterState, request: Request) -> Response:
    alloc_id = request.path_params["alloc_id"]
    q = request.query_params
    task = q.get("task", "")
    if not task:
        raise BadRequest("must provide task name")
    follow, plain = _go_bool(request, "follow"), _go_bool(request, "plain")
    log_type = q.get("type", "")
    if log_type not in ("stdout", "stderr"):
        raise BadRequest("must provide log type (stdout/stderr)")
    raw_offset = q.get("offset", "")
    try:
        offset = int(raw_offset) if raw_offset else 0
    except ValueError:
        raise BadRequest(f'error parsing offset: strconv.ParseInt: parsing "{raw_offset}": invalid syntax') from None
    origin = q.get("origin") or "start"
    if origin not in ("start", "end"):
        raise BadRequest("origin must be start or end")
    text = log_text(state, alloc_id, task, log_type)  # errors are answered before any byte
    media = "text/plain" if plain else "application/json"
    file_name = f"alloc/logs/{task}.{log_type}.0"

    def frame(data: bytes, at: int) -> bytes:
        if plain:
            return data
        return json.dumps({"Offset": at, "Data": base64.b64encode(data).decode(), "File": file_name}).encode()

    position = _start(len(text), offset, origin)
    first = text[position:]
    if not follow:
        return Response(frame(first, position + len(first)) if first else b"", media_type=media)

    async def body() -> AsyncIterator[bytes]:
        nonlocal position
        quiet = 0.0
        while True:
            try:
                current = log_text(state, alloc_id, task, log_type)
            except NotFound:  # collected meanwhile: what was written stays what it was
                current = text
            if len(current) > position:
                chunk = current[position:]
                position = len(current)
                quiet = 0.0
                yield frame(chunk, position)
            elif not plain and quiet >= HEARTBEAT_S:
                quiet = 0.0
                yield b"{}"
            if await request.is_disconnected():
                return
            await asyncio.sleep(POLL_S)
            quiet += POLL_S

    return StreamingResponse(body(), media_type=media)
