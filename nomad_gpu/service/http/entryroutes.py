"""The routes that act on one entry after it was submitted.

    POST   /v1/jobs/{id}/hold      keep a queued entry's place, admit nothing for it
    POST   /v1/jobs/{id}/release   undo hold
    POST   /v1/jobs/{id}/requeue   stop a live attempt and queue the entry again (no retry used)
    PATCH  /v1/jobs/{id}           change its priority: {"priority": N}

A team's token acts only on its own team's entries; another team's entry is a 404, as for cancel.
A request the entry's state does not allow (hold a running entry, re-prioritise a finished one) is a
409. What Nomad says of an entry is `entryreads.py`; a sweep's cancel, `sweeproutes.py`. Routes raise
errors of the tree; `httpkit.STATUSES` gives each its status.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nomad_gpu.api.payloads import Patch
from nomad_gpu.domain.errors import InvalidRequest, StateConflict
from nomad_gpu.service.admission.access import caller_of
from nomad_gpu.service.http.apicontext import ApiContext, answer
from nomad_gpu.service.http.httpkit import read_body, visible_entry
from nomad_gpu.store import QueueEntry

MAX_PATCH_BYTES = 4096
PATCHABLE = tuple(Patch.__dataclass_fields__)


def entry_routes(api: ApiContext) -> list[Route]:
    service = api.service
    return [
        Route("/v1/jobs/{id}", Patcher(api).patch, methods=["PATCH"]),
        Route("/v1/jobs/{id}/hold", EntryAction(api, service.hold).endpoint, methods=["POST"]),
        Route("/v1/jobs/{id}/release", EntryAction(api, service.release).endpoint, methods=["POST"]),
        Route("/v1/jobs/{id}/requeue", EntryAction(api, service.requeue).endpoint, methods=["POST"]),
    ]


def act(api: ApiContext, request: Request, change: Callable[[str], QueueEntry]) -> QueueEntry:
    """``change`` applied to the entry the request names, if the caller may see it; the entry's state
    refusing a well-formed request is a conflict (409), not a bad request."""
    caller, entry_id = caller_of(request.scope), request.path_params["id"]
    visible_entry(api.service, caller, entry_id)
    try:
        return change(entry_id)
    except InvalidRequest as exc:  # the request is well formed: the entry's state refuses it
        raise StateConflict(str(exc)) from exc


class EntryAction:
    """A route that moves an entry with no body: hold, release, requeue."""

    def __init__(self, api: ApiContext, change: Callable[[str], QueueEntry]) -> None:
        self.api = api
        self.change = change

    async def endpoint(self, request: Request) -> Response:
        moved = await run_in_threadpool(act, self.api, request, self.change)
        return answer(self.api.entry_payload(moved))


class Patcher:
    """PATCH: the fields of an entry a caller may change (today its priority)."""

    def __init__(self, api: ApiContext) -> None:
        self.api = api

    async def patch(self, request: Request) -> Response:
        body = await read_body(request, MAX_PATCH_BYTES, "request body")
        try:
            data = json.loads(body.decode("utf-8")) if body.strip() else None
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidRequest(f"the body is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not data:
            raise InvalidRequest('send a JSON object of the fields to change, e.g. {"priority": 80}')
        unknown = sorted(set(data) - set(PATCHABLE))
        if unknown:
            raise InvalidRequest(f"cannot change {', '.join(unknown)} (changeable: {', '.join(PATCHABLE)})")
        priority = data["priority"]
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 100:
            raise InvalidRequest("priority must be an integer from 1 to 100")
        service = self.api.service
        moved = await run_in_threadpool(act, self.api, request, lambda i: service.update(i, priority=priority))
        return answer(self.api.entry_payload(moved))
