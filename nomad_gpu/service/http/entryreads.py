"""What Nomad says of one entry: its current attempt's allocations, the HCL it was registered with, and a
task's logs.

    GET    /v1/jobs/{id}/allocations   the current attempt's allocations, as Nomad reports them
    GET    /v1/jobs/{id}/hcl       the HCL Nomad stored with the job
    GET    /v1/jobs/{id}/logs      a task's stdout or stderr (?type= &offset= &group= &index= &task=)

Reads from Nomad run in the thread pool with a timeout each; Nomad's refusal is passed on in one line;
a service with no Nomad client to read from answers 503. A team's token reads only its team's entries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nomad_gpu.api.payloads import Allocations
from nomad_gpu.domain.errors import InvalidRequest, Unavailable
from nomad_gpu.service.admission.access import caller_of
from nomad_gpu.service.http.apicontext import ApiContext, answer
from nomad_gpu.service.http.httpkit import visible_entry
from nomad_gpu.service.http.jobdetail import JobDetail, nomad_ui_url, timeline
from nomad_gpu.store import QueueEntry


def entry_read_routes(api: ApiContext, clock: Callable[[], float] | None = None) -> list[Route]:
    """``clock``: the time an attempt's timeline is read at (the scheduler's clock by default)."""
    reads = EntryReads(api, clock or api.service.clock)
    return [
        Route("/v1/jobs/{id}/allocations", reads.allocations, methods=["GET"]),
        Route("/v1/jobs/{id}/hcl", reads.hcl, methods=["GET"]),
        Route("/v1/jobs/{id}/logs", reads.logs, methods=["GET"]),
    ]


class EntryReads:
    def __init__(self, api: ApiContext, clock: Callable[[], float]) -> None:
        self.api = api
        self.detail = JobDetail(api.nomad) if api.nomad is not None else None
        self.now = clock

    def reader(self) -> JobDetail:
        if self.detail is None:
            raise Unavailable("this service has no Nomad client to read from")
        return self.detail

    def entry_of(self, request: Request) -> QueueEntry:
        return visible_entry(self.api.service, caller_of(request.scope), request.path_params["id"])

    async def allocations(self, request: Request) -> Response:
        nomad_address = self.api.nomad_address

        def read() -> Response:
            entry = self.entry_of(request)
            views = self.reader().allocations(entry)
            out = Allocations(entry.id, entry.nomad_job_id, entry.namespace, **timeline(entry, self.now()),
                              allocations=tuple(v.to_payload() for v in views))
            if nomad_address and entry.registered_at is not None:  # Nomad has never had an unregistered job
                out = replace(out, nomad_ui=nomad_ui_url(nomad_address, entry.nomad_job_id, entry.namespace))
            return answer(out)

        return await run_in_threadpool(read)

    async def hcl(self, request: Request) -> Response:
        def read() -> Response:
            return answer(self.reader().hcl(self.entry_of(request)))

        return await run_in_threadpool(read)

    async def logs(self, request: Request) -> Response:
        q = request.query_params
        offset = count(q.get("offset"), "offset")
        raw_index = q.get("index")
        index = count(raw_index, "index") if raw_index is not None else None
        log_type = q.get("type") or "stdout"

        def read() -> Response:
            entry = self.entry_of(request)
            data, alloc, task = self.reader().logs(entry, log_type, offset, group=q.get("group"), index=index,
                                                   task=q.get("task"))
            ended = alloc.client_status in ("complete", "failed", "lost")
            return Response(data, media_type="text/plain; charset=utf-8",
                            headers={"X-Log-Offset": str(offset + len(data)), "X-Log-Ended": str(ended).lower(),
                                     "X-Allocation-Id": alloc.id, "X-Task": task})

        return await run_in_threadpool(read)


def count(value: str | None, name: str) -> int:
    """A non-negative integer query parameter; 0 when absent or empty."""
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise InvalidRequest(f"{name} must be a non-negative integer")
    return int(value)
