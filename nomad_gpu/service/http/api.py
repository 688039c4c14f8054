"""The HTTP API of the service (Starlette). Errors are JSON `{"error": "..."}` with a 4xx status.

    POST   /v1/jobs            submit a job or sweep spec (YAML or JSON body); Idempotency-Key honoured
    GET    /v1/jobs            list entries (?state=queued,running &sweep=ID &limit=N &offset=K; default all;
                               &eta=true adds each queued entry's expected start and each live one's
                               expected end, or null: unknown, and what the estimate rests on)
    GET    /v1/jobs/{id}       one entry, with its wait reason and placements
    DELETE /v1/jobs/{id}       cancel
    GET    /v1/sweeps/{id}     a sweep's progress
    GET    /v1/sweeps, /v1/usage  the caller's sweeps, GPU accounting: see :mod:`nomad_gpu.service.http.listroutes`
    ...                        hold, release, requeue, priority, allocations, HCL, logs, sweep cancel:
                               see :mod:`nomad_gpu.service.http.entryroutes`
    GET    /v1/inventory       nodes with GPU, MIG and share capacity, free and total
    GET    /v1/status          service health and counts
    GET    /v1/teams           GPU-equivalents in use, quota and fair share per team
    GET    /v1/history         GPUs in use, queue depth and admissions per minute over 24 h
    GET    /v1/whoami          the caller's team (null: admin), so the dashboard can say whose view it shows
    GET    /metrics            Prometheus
    GET    /openapi.json       this API described (OpenAPI 3.1; :mod:`nomad_gpu.service.http.openapi`)
    GET    /ui                 the dashboard (static files; its data comes from the routes above)

Every answer is a typed payload of `nomad_gpu.api.payloads` (the shapes the CLI reads back), and every
refusal an error of the project's tree, given its status by the one map in `httpkit.STATUSES`.
The event loop only moves bytes: the body is read with its limit enforced as it arrives, and every
call that parses, takes the scheduler's lock or touches SQLite runs in the thread pool, so one slow
submission (a large spec, a lock held by a cycle) never stalls the other requests. Who may see what
is :mod:`nomad_gpu.service.admission.access`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.api import payloads
from nomad_gpu.api.payloads import Entries, Entry, Inventory, NodeView, Payload, Status, Sweep, Teams, Whoami
from nomad_gpu.domain.errors import InvalidRequest, NomadGpuError, StateConflict, UnknownEntry
from nomad_gpu.render import SpecError
from nomad_gpu.render.loading import MAX_SPEC_BYTES
from nomad_gpu.service.accounting.history import History
from nomad_gpu.service.admission.access import LiveTokens, TokenGate, caller_of, metrics_view, status_view
from nomad_gpu.service.admission.submission import Request as SubmitRequest
from nomad_gpu.service.admission.submission import check_request
from nomad_gpu.service.config.preemptconfig import entry_warnings
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.http.addresses import entry_addresses
from nomad_gpu.service.http.entryroutes import entry_routes
from nomad_gpu.service.http.httpkit import Contained, error, read_body, status_of, visible_entry
from nomad_gpu.service.http.jobdetail import NomadReads
from nomad_gpu.service.http.keeproute import keep_routes
from nomad_gpu.service.http.listroutes import list_routes
from nomad_gpu.service.http.openapi import document
from nomad_gpu.service.http.views import (
    capacity_gpu,
    inventory_for,
    service_inventory,
    teams_for,
    teams_view,
    with_utilisation,
)
from nomad_gpu.service.loops.devicehealth import entry_device_health
from nomad_gpu.service.loops.reclaim import IdleReclaim
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.service.loops.usage import UsagePoller
from nomad_gpu.service.ui import ui_routes
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import TeamQuota

logger = logging.getLogger(__name__)

MAX_BODY = MAX_SPEC_BYTES
FILTER_MAX = 200
"""A `team` or `name` filter of GET /v1/jobs, at most (team and job names are far shorter)."""
SORTS = ("submitted", "position")
"""GET /v1/jobs `sort`: submission order (the default), or the order the scheduler decides in."""


def create_app(service: SchedulerService, token: str | None = None,
               access: AccessSettings | None = None, *, nomad_address: str | None = None,
               history: History | None = None, usage: UsagePoller | None = None,
               nomad: NomadReads | None = None, templates: Collection[str] | None = None,
               namespace_pools: Callable[[str], str | None] | None = None,
               live_tokens: LiveTokens | None = None, idle: IdleReclaim | None = None,
               ha_status: Callable[[], dict[str, Any]] | None = None) -> Starlette:
    """The API over ``service``; ``token`` (NOMAD_GPU_TOKEN) is an admin token added to ``access``.

    ``nomad_address`` is shown in the status (the dashboard links each job to Nomad's UI there);
    ``history`` is what ``/v1/history`` answers from (empty without one); ``usage`` adds each running
    entry's GPU utilisation and memory (``usage``, null while unknown) to the entry JSON; ``nomad``
    answers what is read from Nomad for one entry (allocations, registered HCL, logs); ``templates``, the
    job templates a spec may name (checked at submit when given); ``namespace_pools``, a namespace's default
    node pool in Nomad (:class:`nomad_gpu.service.admission.nodepools.NamespacePools`), for specs that name none;
    ``live_tokens``, the tokens the gate checks, swapped by a config reload (made from ``access`` when None);
    ``idle``, idle reclaim (`keep`, and the idle figures of the usage report).
    ``ha_status``, this replica's role, epoch and the leader's address (service/ha/leadership.py) for the status.
    """
    rules = (access or AccessSettings()).with_admin(token)
    limits = rules.team_limits
    quota = TeamQuota(limits.max_entries, limits.max_stored_bytes, limits.max_kept_entries, limits.max_kept_bytes)
    past = history or History()

    def entry_payload(e: QueueEntry) -> Entry:
        reason = e.reason or (service.pending_reason() if e.state is EntryState.QUEUED else "")
        return replace(e.to_payload(), usage=usage.payload(e.id) if usage is not None else None,
                       addresses=entry_addresses(service, e.id), reason=reason, position=service.position(e),
                       device_health=entry_device_health(service, e),
                       warnings=entry_warnings(e.spec, service.settings.take_back.max_kill_timeout_s))

    async def submit(request: Request) -> Response:
        caller = caller_of(request.scope)
        body = await read_body(request, MAX_BODY)
        content_type = request.headers.get("content-type", "")
        key = request.headers.get("idempotency-key")
        if key and caller.team is not None:
            key = f"{caller.team}/{key}"  # one team's key never answers with another team's entries

        def store() -> Response:  # one hop to a worker thread for the checks and the store
            checked = check_request(SubmitRequest(body, content_type, rules, caller, templates, namespace_pools))
            entries = service.submit(checked.data, idempotency_key=key, spec=checked.spec, quota=quota)
            if len(caller.visible(entries)) != len(entries):  # a key an admin used for another team
                raise StateConflict("this Idempotency-Key was already used for another team's submission")
            return answer(Entries(tuple(entry_payload(e) for e in entries)), status=201)

        return await run_in_threadpool(store)

    async def list_jobs(request: Request) -> Response:
        caller = caller_of(request.scope)
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
            out = [entry_payload(e) for e in entries]
            if with_eta:  # the forecast runs the cycle forward: only when asked (`?eta=true`)
                etas = service.etas()
                out = [replace(e, eta=etas[e.id][0], eta_basis=etas[e.id][1]) if e.id in etas
                       else replace(e, eta=None, eta_basis="") if e.state in ("queued", "admitted", "running")
                       else e for e in out]
            return answer(Entries(tuple(out)))

        return await run_in_threadpool(read)

    async def get_job(request: Request) -> Response:
        entry = await run_in_threadpool(visible_entry, service, caller_of(request.scope), request.path_params["id"])
        return answer(entry_payload(entry))

    async def cancel_job(request: Request) -> Response:
        caller, entry_id = caller_of(request.scope), request.path_params["id"]

        def cancel() -> QueueEntry:
            visible_entry(service, caller, entry_id)
            return service.cancel(entry_id)

        return answer(entry_payload(await run_in_threadpool(cancel)))

    async def sweep(request: Request) -> Response:
        caller, sweep_id = caller_of(request.scope), request.path_params["id"]

        def read() -> Response:
            entries = service.store.list(None, sweep=sweep_id, team=caller.team)
            if not entries:
                raise UnknownEntry(f"no sweep {sweep_id!r}")
            return answer(sweep_payload(sweep_id, [entry_payload(e) for e in entries]))

        return await run_in_threadpool(read)

    async def inventory(request: Request) -> Response:
        def read() -> Response:
            nodes = [NodeView.from_json(n) for n in service_inventory(service)]
            if usage is not None:
                nodes = with_utilisation(nodes, usage.utilisation())
            return answer(Inventory(tuple(inventory_for(nodes, caller_of(request.scope)))))

        return await run_in_threadpool(read)

    async def status(request: Request) -> Response:
        caller = caller_of(request.scope)

        def read() -> Response:  # from memory: never waits long for the scheduler, never reads the store
            raw, teams = service.status_and_owners()
            out = Status.from_json(status_view(raw, caller, teams))
            out = replace(out, **ha_status()) if ha_status is not None else out
            return answer(replace(out, nomad_address=nomad_address) if nomad_address else out)

        return await run_in_threadpool(read)

    async def teams(request: Request) -> Response:
        caller = caller_of(request.scope)

        def read() -> Response:
            live = service.store.list([EntryState.QUEUED, EntryState.ADMITTED, EntryState.RUNNING,
                                       EntryState.PREEMPTING])
            with service._lock:  # reads only: the usage and the inventory at one instant
                usage = dict(service.ledger.team_usage())
                capacity = capacity_gpu(service.ledger)
            rows = teams_view(live, usage, service.settings.fair, capacity)
            return answer(Teams(round(capacity, 3), tuple(teams_for(rows, caller))))

        return await run_in_threadpool(read)

    async def recent(request: Request) -> Response:
        data = await run_in_threadpool(past.to_json, time.time())
        return answer(payloads.History.from_json(data))

    async def whoami(request: Request) -> Response:
        caller = caller_of(request.scope)
        return answer(Whoami(team=caller.team, admin=caller.admin, user=caller.user))

    async def metrics(request: Request) -> Response:
        text = await run_in_threadpool(lambda: metrics_view(service.metrics.registry, caller_of(request.scope),
                                                            show_teams=rules.metrics_open_teams))
        return Response(text, media_type="text/plain; version=0.0.4")

    described = document()

    async def openapi(request: Request) -> Response:
        return JSONResponse(described)

    async def refused(request: Request, exc: Exception) -> Response:
        status = status_of(exc)
        if status is None:  # in the tree but in no row of the map: a bug, answered as one
            return await crashed(request, exc)
        return error(status, str(exc) or type(exc).__name__, exc.errors if isinstance(exc, SpecError) else ())

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, f"no such endpoint: {request.method} {request.url.path}")

    async def bad_method(request: Request, exc: Exception) -> Response:
        return error(405, f"method {request.method} not allowed on {request.url.path}")

    async def crashed(request: Request, exc: Exception) -> Response:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error(500, f"internal error ({type(exc).__name__}); see the service log")

    routes = [
        Route("/v1/jobs", submit, methods=["POST"]),
        Route("/v1/jobs", list_jobs, methods=["GET"]),
        Route("/v1/jobs/{id}", get_job, methods=["GET"]),
        Route("/v1/jobs/{id}", cancel_job, methods=["DELETE"]),
        Route("/v1/sweeps/{id}", sweep, methods=["GET"]),
        Route("/v1/inventory", inventory, methods=["GET"]),
        Route("/v1/status", status, methods=["GET"]),
        Route("/v1/teams", teams, methods=["GET"]),
        Route("/v1/history", recent, methods=["GET"]),
        Route("/v1/whoami", whoami, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *entry_routes(service, entry_payload, nomad=nomad, nomad_address=nomad_address),
        *list_routes(service, idle=idle.accounts if idle is not None else None),
        *keep_routes(service, idle),
        *ui_routes(),
    ]
    handlers = {NomadGpuError: refused, 404: not_found, 405: bad_method, Exception: crashed}
    return Starlette(routes=routes, middleware=[Middleware(Contained), Middleware(TokenGate, access=rules,
                                                                                  live=live_tokens)],
                     exception_handlers=handlers)


def answer(payload: Payload, status: int = 200) -> JSONResponse:
    return JSONResponse(payload.to_json(), status_code=status)


def by_position(entry: QueueEntry, position: int | None) -> tuple[int, int]:
    """`sort=position`: queued entries in the order the scheduler decides in, then the queued ones it does
    not consider (held, waiting for `after:`, beyond max_parallel), then admitted and running, then the
    ended; each group in submission order (the store's, kept by a stable sort)."""
    if entry.state is EntryState.QUEUED:
        return (0, position) if position is not None else (1, 0)
    return (2 if entry.state.holds_capacity() else 3, 0)


def sweep_payload(sweep_id: str, trials: list[Entry]) -> Sweep:
    """A sweep's trials and their counts by state."""
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state] = counts.get(t.state, 0) + 1
    return Sweep(sweep_id, len(trials), counts, tuple(trials))


