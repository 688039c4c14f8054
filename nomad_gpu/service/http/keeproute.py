"""`POST /v1/jobs/{id}/keep` `{"for": "2h"}`: the owner of a running job postpones its idle reclaim.

The caller's token must see the entry (another team's is a 404, as for every entry route); the duration
is read as a spec's `runtime:` is (`2h`, `90m`, seconds), at most the class's `max_keep`; a job that is not
running, or whose class is never taken back, is a 409. Bad input changes nothing (service/loops/reclaim.py).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.api.payloads import Kept
from nomad_gpu.domain.errors import InvalidRequest, Unavailable
from nomad_gpu.render.durations import Seconds
from nomad_gpu.service.admission.access import caller_of
from nomad_gpu.service.http.httpkit import read_body, visible_entry
from nomad_gpu.service.loops.reclaim import IdleReclaim
from nomad_gpu.service.loops.scheduler import SchedulerService

MAX_BODY = 1024
DEFAULT_KEEP_S = 3600.0
_SECONDS: TypeAdapter[float] = TypeAdapter(Seconds)


def keep_seconds(raw: Any) -> float | None:
    """The `for` of a keep in seconds (None: not given); InvalidRequest in one line otherwise."""
    if raw is None:
        return None
    try:
        return float(_SECONDS.validate_python(raw))
    except ValidationError:
        raise InvalidRequest(f"for: {raw!r} is not a duration like 2h or 90m (more than 0)") from None


def keep_routes(service: SchedulerService, idle: IdleReclaim | None) -> list[Route]:
    """The route; without idle reclaim (an app built without the usage poller) it answers 503."""
    return [Route("/v1/jobs/{id}/keep", Keeper(service, idle).keep, methods=["POST"])]


class Keeper:
    def __init__(self, service: SchedulerService, idle: IdleReclaim | None) -> None:
        self.service = service
        self.idle = idle

    async def keep(self, request: Request) -> Response:
        service, idle = self.service, self.idle
        body = await read_body(request, MAX_BODY, "request body")
        try:
            data = json.loads(body.decode("utf-8")) if body.strip() else {}
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidRequest(f"the body is not JSON: {exc}") from exc
        if not isinstance(data, dict) or set(data) - {"for"}:
            raise InvalidRequest('send {"for": "2h"} (or nothing: one hour)')
        for_s = keep_seconds(data.get("for"))
        caller, entry_id = caller_of(request.scope), request.path_params["id"]

        def act() -> Response:
            entry = visible_entry(service, caller, entry_id)
            if idle is None:
                raise Unavailable("idle reclaim does not run in this service")
            until = idle.keep(entry, DEFAULT_KEEP_S if for_s is None else for_s, service.clock(),
                              capped=for_s is None)
            return JSONResponse(Kept(entry.id, until).to_json())

        return await run_in_threadpool(act)
