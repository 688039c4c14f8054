"""The queue's own routes: submit, list, read and cancel entries.

    POST   /v1/jobs            submit a job or sweep spec (YAML or JSON body); Idempotency-Key honoured
    GET    /v1/jobs            list entries (?state= &sweep= &team= &name= &limit= &offset= &sort= &eta=)
    GET    /v1/jobs/{id}       one entry, with its wait reason and placements
    DELETE /v1/jobs/{id}       cancel

A team's token sees and cancels only its team's entries (another team's entry is a 404). Parsing, the
scheduler's lock and the store run in the thread pool, never on the event loop.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nomad_gpu.api.payloads import Entries
from nomad_gpu.domain.errors import InvalidRequest, StateConflict
from nomad_gpu.render.loading import MAX_SPEC_BYTES
from nomad_gpu.service.admission.access import caller_of
from nomad_gpu.service.admission.submission import Request as SubmitRequest
from nomad_gpu.service.admission.submission import check_request
from nomad_gpu.service.http.apicontext import ApiContext, answer
from nomad_gpu.service.http.httpkit import read_body, visible_entry
from nomad_gpu.store import EntryState, QueueEntry

MAX_BODY = MAX_SPEC_BYTES
FILTER_MAX = 200
"""A `team` or `name` filter of GET /v1/jobs, at most (team and job names are far shorter)."""
SORTS = ("submitted", "position")
"""GET /v1/jobs `sort`: submission order (the default), or the order the scheduler decides in."""


def job_routes(api: ApiContext) -> list[Route]:
    jobs = JobRoutes(api)
    return [
        Route("/v1/jobs", jobs.submit, methods=["POST"]),
        Route("/v1/jobs", jobs.list_jobs, methods=["GET"]),
        Route("/v1/jobs/{id}", jobs.get_job, methods=["GET"]),
        Route("/v1/jobs/{id}", jobs.cancel_job, methods=["DELETE"]),
    ]


class JobRoutes:
    def __init__(self, api: ApiContext) -> None:
        self.api = api

    async def submit(self, request: Request) -> Response:
        api, caller = self.api, caller_of(request.scope)
        body = await read_body(request, MAX_BODY)
        content_type = request.headers.get("content-type", "")
        key = request.headers.get("idempotency-key")
        if key and caller.team is not None:
            key = f"{caller.team}/{key}"  # one team's key never answers with another team's entries

        def store() -> Response:  # one hop to a worker thread for the checks and the store
            checked = check_request(SubmitRequest(body, content_type, api.rules, caller, api.templates,
                                                  api.namespace_pools))
            entries = api.service.submit(checked.data, idempotency_key=key, spec=checked.spec, quota=api.quota)
            if len(caller.visible(entries)) != len(entries):  # a key an admin used for another team
                raise StateConflict("this Idempotency-Key was already used for another team's submission")
            return answer(Entries(tuple(api.entry_payload(e) for e in entries)), status=201)

        return await run_in_threadpool(store)

    async def list_jobs(self, request: Request) -> Response:
        api, caller = self.api, caller_of(request.scope)
        service = api.service
        states = None
        if raw := request.query_params.get("state"):
            try:
                states = [EntryState(s.strip()) for s in raw.split(",") if s.strip()]
            except ValueError:
                raise InvalidRequest(f"unknown state in {raw!r}; known: {', '.join(s.value for s in EntryState)}"
                                     ) from None
        limit, offset = request.query_params.get("limit"), request.query_params.get("offset")
        for name, value in (("limit", limit), ("offset", offset)):
            if value is not None and not (value.isascii() and value.isdigit() and len(value) <= 18):
                raise InvalidRequest(f"{name} must be a non-negative integer")
        sweep = request.query_params.get("sweep")
        n = int(limit) if limit else None
        skip = int(offset) if offset else 0
        wanted_team, name_glob = request.query_params.get("team"), request.query_params.get("name")
        for name, value in (("team", wanted_team), ("name", name_glob)):
            if value is not None and (len(value) > FILTER_MAX or "\x00" in value):
                raise InvalidRequest(f"{name} must be at most {FILTER_MAX} characters, without NUL")
        # a team filter narrows what the token sees, never widens it: another team's name finds nothing
        team = caller.team if wanted_team is None else wanted_team
        nothing = caller.team is not None and team != caller.team

        with_eta = request.query_params.get("eta") in ("1", "true")
        sort = request.query_params.get("sort") or "submitted"
        if sort not in SORTS:
            raise InvalidRequest(f"sort must be one of {', '.join(SORTS)}, not {sort[:40]!r}")

        def read() -> Response:  # a long list takes a while to encode too: not on the event loop
            # a team's view is filtered in SQL: other teams' rows are never read for it
            if nothing:
                entries = []
            elif sort == "position":  # the positions live in memory: sorted here, then the page cut
                found = sorted(service.store.list(states, sweep=sweep, team=team, name_glob=name_glob),
                               key=lambda e: by_position(e, service.position(e)))
                entries = found[skip:None if n is None else skip + n]
            else:
                entries = service.store.list(states, sweep=sweep, limit=n, offset=skip, team=team,
                                             name_glob=name_glob)
            out = [api.entry_payload(e) for e in entries]
            if with_eta:  # the forecast runs the cycle forward: only when asked (`?eta=true`)
                etas = service.etas()
                out = [replace(e, eta=etas[e.id][0], eta_basis=etas[e.id][1]) if e.id in etas
                       else replace(e, eta=None, eta_basis="") if e.state in ("queued", "admitted", "running")
                       else e for e in out]
            return answer(Entries(tuple(out)))

        return await run_in_threadpool(read)

    async def get_job(self, request: Request) -> Response:
        entry = await run_in_threadpool(visible_entry, self.api.service, caller_of(request.scope),
                                        request.path_params["id"])
        return answer(self.api.entry_payload(entry))

    async def cancel_job(self, request: Request) -> Response:
        service, caller, entry_id = self.api.service, caller_of(request.scope), request.path_params["id"]

        def cancel() -> QueueEntry:
            visible_entry(service, caller, entry_id)
            return service.cancel(entry_id)

        return answer(self.api.entry_payload(await run_in_threadpool(cancel)))


def by_position(entry: QueueEntry, position: int | None) -> tuple[int, int]:
    """`sort=position`: queued entries in the order the scheduler decides in, then the queued ones it does
    not consider (held, waiting for `after:`, beyond max_parallel), then admitted and running, then the
    ended; each group in submission order (the store's, kept by a stable sort)."""
    if entry.state is EntryState.QUEUED:
        return (0, position) if position is not None else (1, 0)
    return (2 if entry.state.holds_capacity() else 3, 0)
