"""The routes that act on, or look into, one entry or one sweep after it was submitted.

    POST   /v1/jobs/{id}/hold      keep a queued entry's place, admit nothing for it
    POST   /v1/jobs/{id}/release   undo hold
    POST   /v1/jobs/{id}/requeue   stop a live attempt and queue the entry again (no retry used)
    PATCH  /v1/jobs/{id}           change its priority: {"priority": N}
    GET    /v1/jobs/{id}/allocations   the current attempt's allocations, as Nomad reports them
    GET    /v1/jobs/{id}/hcl       the HCL Nomad stored with the job
    GET    /v1/jobs/{id}/logs      a task's stdout or stderr (?type= &offset= &group= &index= &task=)
    DELETE /v1/sweeps/{id}         cancel every trial of a sweep

A team's token acts only on its own team's entries; another team's entry is a 404, as for cancel.
A request the entry's state does not allow (hold a running entry, re-prioritise a finished one) is a
409. Reads from Nomad run in the thread pool with a timeout each; Nomad's refusal is passed on
in one line. Routes raise errors of the tree; `httpkit.STATUSES` gives each its status.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.api.payloads import Allocations, Entry, Patch, Payload, Sweep
from nomad_gpu.domain.errors import InvalidRequest, StateConflict, Unavailable
from nomad_gpu.service.admission.access import caller_of
from nomad_gpu.service.http.httpkit import read_body, visible_entry
from nomad_gpu.service.http.jobdetail import JobDetail, NomadReads, nomad_ui_url, timeline
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import QueueEntry

logger = logging.getLogger(__name__)

MAX_PATCH_BYTES = 4096
PATCHABLE = tuple(Patch.__dataclass_fields__)


def entry_routes(service: SchedulerService, entry_payload: Callable[[QueueEntry], Entry], *,
                 nomad: NomadReads | None = None, nomad_address: str | None = None,
                 clock: Callable[[], float] | None = None) -> list[Route]:
    """The routes above; ``nomad`` answers the reads from Nomad (503 without one)."""
    detail = JobDetail(nomad) if nomad is not None else None
    now = clock or service.clock

    def act(request: Request, change: Callable[[str], QueueEntry]) -> QueueEntry:
        caller, entry_id = caller_of(request.scope), request.path_params["id"]
        visible_entry(service, caller, entry_id)
        try:
            return change(entry_id)
        except InvalidRequest as exc:  # the request is well formed: the entry's state refuses it
            raise StateConflict(str(exc)) from exc

    def action(change: Callable[[str], QueueEntry]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            moved = await run_in_threadpool(act, request, change)
            return _answer(entry_payload(moved))
        return endpoint

    async def patch(request: Request) -> Response:
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
        moved = await run_in_threadpool(act, request, lambda i: service.update(i, priority=priority))
        return _answer(entry_payload(moved))

    async def cancel_sweep(request: Request) -> Response:
        caller, sweep_id = caller_of(request.scope), request.path_params["id"]

        def cancel() -> Response:
            moved = [entry_payload(e) for e in service.cancel_sweep(sweep_id, team=caller.team)]
            states: dict[str, int] = {}
            for e in moved:
                states[e.state] = states.get(e.state, 0) + 1
            return _answer(Sweep(sweep_id, len(moved), states, tuple(moved)))

        return await run_in_threadpool(cancel)

    def reader() -> JobDetail:
        if detail is None:
            raise Unavailable("this service has no Nomad client to read from")
        return detail

    def entry_of(request: Request) -> QueueEntry:
        return visible_entry(service, caller_of(request.scope), request.path_params["id"])

    async def allocations(request: Request) -> Response:
        def read() -> Response:
            entry = entry_of(request)
            views = reader().allocations(entry)
            out = Allocations(entry.id, entry.nomad_job_id, entry.namespace, **timeline(entry, now()),
                              allocations=tuple(v.to_payload() for v in views))
            if nomad_address and entry.registered_at is not None:  # Nomad has never had an unregistered job
                out = replace(out, nomad_ui=nomad_ui_url(nomad_address, entry.nomad_job_id, entry.namespace))
            return _answer(out)

        return await run_in_threadpool(read)

    async def hcl(request: Request) -> Response:
        def read() -> Response:
            return _answer(reader().hcl(entry_of(request)))

        return await run_in_threadpool(read)

    async def logs(request: Request) -> Response:
        q = request.query_params
        offset = _count(q.get("offset"), "offset")
        raw_index = q.get("index")
        index = _count(raw_index, "index") if raw_index is not None else None
        log_type = q.get("type") or "stdout"

        def read() -> Response:
            entry = entry_of(request)
            data, alloc, task = reader().logs(entry, log_type, offset, group=q.get("group"), index=index,
                                              task=q.get("task"))
            ended = alloc.client_status in ("complete", "failed", "lost")
            return Response(data, media_type="text/plain; charset=utf-8",
                            headers={"X-Log-Offset": str(offset + len(data)), "X-Log-Ended": str(ended).lower(),
                                     "X-Allocation-Id": alloc.id, "X-Task": task})

        return await run_in_threadpool(read)

    return [
        Route("/v1/jobs/{id}", patch, methods=["PATCH"]),
        Route("/v1/jobs/{id}/hold", action(service.hold), methods=["POST"]),
        Route("/v1/jobs/{id}/release", action(service.release), methods=["POST"]),
        Route("/v1/jobs/{id}/requeue", action(service.requeue), methods=["POST"]),
        Route("/v1/jobs/{id}/allocations", allocations, methods=["GET"]),
        Route("/v1/jobs/{id}/hcl", hcl, methods=["GET"]),
        Route("/v1/jobs/{id}/logs", logs, methods=["GET"]),
        Route("/v1/sweeps/{id}", cancel_sweep, methods=["DELETE"]),
    ]


def _answer(payload: Payload) -> JSONResponse:
    return JSONResponse(payload.to_json())


def _count(value: str | None, name: str) -> int:
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise InvalidRequest(f"{name} must be a non-negative integer")
    return int(value)
