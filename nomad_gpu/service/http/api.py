"""The HTTP API of the service (Starlette). Errors are JSON `{"error": "..."}` with a 4xx status.

    POST   /v1/jobs            submit a job or sweep spec (YAML or JSON body); Idempotency-Key honoured
    GET    /v1/jobs            list entries (?state=queued,running &sweep=ID &limit=N &offset=K; default all;
                               &eta=true adds each queued entry's expected start and each live one's
                               expected end, or null: unknown, and what the estimate rests on)
    GET    /v1/jobs/{id}       one entry, with its wait reason and placements
    DELETE /v1/jobs/{id}       cancel
    GET    /v1/sweeps/{id}     a sweep's progress
    GET    /v1/sweeps, /v1/usage  the caller's sweeps, GPU accounting: see :mod:`nomad_gpu.service.http.listroutes`
    ...                        hold, release, requeue, priority: :mod:`nomad_gpu.service.http.entryroutes`;
                               allocations, HCL, logs: :mod:`nomad_gpu.service.http.entryreads`;
                               sweep cancel: :mod:`nomad_gpu.service.http.sweeproutes`
    GET    /v1/inventory       nodes with GPU, MIG and share capacity, free and total
    GET    /v1/status          service health and counts
    GET    /v1/teams           GPU-equivalents in use, quota and fair share per team
    GET    /v1/history         GPUs in use, queue depth and admissions per minute over 24 h
    GET    /v1/whoami          the caller's team (null: admin), so the dashboard can say whose view it shows
    GET    /metrics            Prometheus
    GET    /openapi.json       this API described (OpenAPI 3.1; :mod:`nomad_gpu.service.http.openapi`)
    GET    /ui                 the dashboard (static files; its data comes from the routes above)

`create_app` only assembles the app: the routes are in one module per resource group, each a function of
the shared `ApiContext` (`apicontext.py`): `jobroutes`, `sweeproutes`, `clusterroutes` (inventory, status,
teams, history, whoami), `metaroutes` (metrics, OpenAPI), `entryroutes`, `entryreads`, `listroutes`,
`keeproute`, and the dashboard's static files (`service/ui`).

Every answer is a typed payload of `nomad_gpu.api.payloads` (the shapes the CLI reads back), and every
refusal an error of the project's tree, given its status by the one map in `httpkit.STATUSES`.
The event loop only moves bytes: the body is read with its limit enforced as it arrives, and every
call that parses, takes the scheduler's lock or touches SQLite runs in the thread pool, so one slow
submission (a large spec, a lock held by a cycle) never stalls the other requests. Who may see what
is :mod:`nomad_gpu.service.admission.access`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from nomad_gpu.domain.errors import NomadGpuError
from nomad_gpu.render import SpecError
from nomad_gpu.service.accounting.history import History
from nomad_gpu.service.admission.access import LiveTokens, TokenGate
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.http.apicontext import ApiContext
from nomad_gpu.service.http.clusterroutes import cluster_routes
from nomad_gpu.service.http.entryreads import entry_read_routes
from nomad_gpu.service.http.entryroutes import entry_routes
from nomad_gpu.service.http.httpkit import Contained, error, status_of
from nomad_gpu.service.http.jobdetail import NomadReads
from nomad_gpu.service.http.jobroutes import MAX_BODY, job_routes
from nomad_gpu.service.http.keeproute import keep_routes
from nomad_gpu.service.http.listroutes import list_routes
from nomad_gpu.service.http.metaroutes import meta_routes
from nomad_gpu.service.http.sweeproutes import sweep_routes
from nomad_gpu.service.loops.reclaim import IdleReclaim
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.service.loops.usage import UsagePoller
from nomad_gpu.service.ui import ui_routes
from nomad_gpu.store.contract import TeamQuota

logger = logging.getLogger(__name__)

__all__ = ["MAX_BODY", "create_app"]


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
    api = ApiContext(service, rules, quota, history=history or History(), usage=usage, nomad=nomad,
                     nomad_address=nomad_address, templates=templates, namespace_pools=namespace_pools, idle=idle,
                     ha_status=ha_status)
    routes = [
        *job_routes(api),
        *sweep_routes(api),
        *cluster_routes(api),
        *meta_routes(api),
        *entry_routes(api),
        *entry_read_routes(api),
        *list_routes(service, idle=idle.accounts if idle is not None else None),
        *keep_routes(service, idle),
        *ui_routes(),
    ]
    handlers = {NomadGpuError: refused, 404: not_found, 405: bad_method, Exception: crashed}
    return Starlette(routes=routes, middleware=[Middleware(Contained), Middleware(TokenGate, access=rules,
                                                                                  live=live_tokens)],
                     exception_handlers=handlers)


async def refused(request: Request, exc: Exception) -> Response:
    """An error of the project's tree: its status from the one map (`httpkit.STATUSES`)."""
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
