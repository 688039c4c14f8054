"""What every route of the API shares: the one exception-to-status map, the one-line JSON error, a
bounded body, an entry a caller may see.

Routes raise errors of the project's tree (`nomad_gpu.domain.errors`) and never choose a status:
:data:`STATUSES` does, in one place, so the same refusal is the same status on every route. Kept apart
from the routes themselves (`api.py`, `entryroutes.py`) so that each route module imports the same
answers and no two of them word a refusal differently.
"""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nomad_gpu.api.payloads import ErrorReply
from nomad_gpu.domain.errors import (
    InvalidRequest,
    NotAllowed,
    OverLimit,
    StateConflict,
    TooLarge,
    Unavailable,
    UnknownEntry,
    Unschedulable,
    UpstreamFailed,
)
from nomad_gpu.nomad.client import NomadError, NomadNotFound
from nomad_gpu.service.admission.access import Caller
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import QueueEntry
from nomad_gpu.store.contract import StaleTransition

logger = logging.getLogger(__name__)

STATUSES: tuple[tuple[type[Exception], int], ...] = (
    (UnknownEntry, 404),  # also another team's entry: the same answer as one that does not exist
    (NomadNotFound, 404),
    (NotAllowed, 403),
    (StateConflict, 409),
    (StaleTransition, 409),  # another request moved the entry first
    (TooLarge, 413),
    (OverLimit, 429),
    (Unschedulable, 422),  # well-formed, but no node of the fleet could ever run it
    (InvalidRequest, 400),  # SpecError and RenderError too
    (Unavailable, 503),
    (UpstreamFailed, 502),
    (NomadError, 502),
)
"""Exception class -> HTTP status, read in order (the first class that matches decides). What matches no
row is a bug: a 500 that names only the exception's type, with the traceback in the service's log."""


def status_of(exc: BaseException) -> int | None:
    """The status that answers ``exc``; None for an unexpected one (a 500)."""
    return next((status for kind, status in STATUSES if isinstance(exc, kind)), None)


RETRY_AFTER_S = 30
"""What a 503 asks the client to wait before trying again."""


def error(status: int, message: str, errors: tuple[str, ...] = ()) -> JSONResponse:
    """The refusal: its one line, and its messages one by one (a spec's every mistake; else the line)."""
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
    return JSONResponse(ErrorReply(message, errors or (message,)).to_json(), status_code=status, headers=headers)


class Contained:
    """ASGI middleware: an unexpected exception is logged once, here (through the handlers the entry point
    set up, so the log limiter sees it), and answered 500. Starlette's outermost layer would re-raise it to
    uvicorn after answering, and uvicorn logs a second traceback through its own handler, past the limiter:
    200 bad requests wrote 1.27 MB of log (issue 31, item 5)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            logger.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=exc)
            if not started:  # else the answer is half sent: the connection closes
                await error(500, f"internal error ({type(exc).__name__}); see the service log")(scope, receive, send)


async def read_body(request: Request, limit: int, what: str = "spec") -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` bytes.

    A declared Content-Length over the limit is refused before a byte is read; a body that
    declares less (or nothing, when chunked) is counted as it arrives and dropped at the limit.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise InvalidRequest("Content-Length must be a whole number of bytes")
        if int(declared) > limit:
            raise TooLarge(f"{what} larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"{what} larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # one line: the refusal below is answered to no one, and logs nothing more
        logger.info("%s %s: the client went away after %d bytes of its %s", request.method, request.url.path, size,
                    what)
        raise InvalidRequest(f"the client went away mid-{what}") from None
    return b"".join(chunks)


def visible_entry(service: SchedulerService, caller: Caller, entry_id: str) -> QueueEntry:
    """The entry, or UnknownEntry when it does not exist or belongs to another team (the same answer)."""
    entry = service.store.get(entry_id)
    if not caller.sees(entry):
        raise UnknownEntry(f"no queue entry {entry_id!r}")
    return entry
