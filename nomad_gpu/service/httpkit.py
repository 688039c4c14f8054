"""What every route of the API shares: the one-line JSON error, a bounded body, an entry a caller may see.

Kept apart from the routes themselves (`api.py`, `entryroutes.py`) so that each route module imports
the same answers and no two of them word a refusal differently.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from nomad_gpu.domain.errors import UnknownEntry
from nomad_gpu.service.access import Caller
from nomad_gpu.service.scheduler import SchedulerService
from nomad_gpu.store import QueueEntry


class ApiError(Exception):
    """A request refused with a status and one line (raised by helpers, answered by the app)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def read_body(request: Request, limit: int, what: str = "spec") -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` bytes.

    A declared Content-Length over the limit is refused before a byte is read; a body that
    declares less (or nothing, when chunked) is counted as it arrives and dropped at the limit.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise ApiError(400, "Content-Length must be a whole number of bytes")
        if int(declared) > limit:
            raise ApiError(413, f"{what} larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"{what} larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def visible_entry(service: SchedulerService, caller: Caller, entry_id: str) -> QueueEntry:
    """The entry, or UnknownEntry when it does not exist or belongs to another team (the same answer)."""
    entry = service.store.get(entry_id)
    if not caller.sees(entry):
        raise UnknownEntry(f"no queue entry {entry_id!r}")
    return entry
