"""What the caller may see of the cluster and the service: reads from memory, each in the thread pool.

    GET    /v1/inventory       nodes with GPU, MIG and share capacity, free and total
    GET    /v1/status          service health and counts
    GET    /v1/teams           GPU-equivalents in use, quota and fair share per team
    GET    /v1/history         GPUs in use, queue depth and admissions per minute over 24 h
    GET    /v1/whoami          the caller's team (null: admin), so the dashboard can say whose view it shows

A team's token sees its own team's figures and other teams' only as the access rules allow
(`admission/access.py`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nomad_gpu.api import payloads
from nomad_gpu.api.payloads import Inventory, NodeView, Status, Teams, Whoami
from nomad_gpu.service.admission.access import caller_of, status_view
from nomad_gpu.service.http.apicontext import ApiContext, answer
from nomad_gpu.service.http.views import (
    capacity_gpu,
    inventory_for,
    service_inventory,
    teams_for,
    teams_view,
    with_utilisation,
)
from nomad_gpu.store import EntryState


def cluster_routes(api: ApiContext) -> list[Route]:
    reads = ClusterReads(api)
    return [
        Route("/v1/inventory", reads.inventory, methods=["GET"]),
        Route("/v1/status", reads.status, methods=["GET"]),
        Route("/v1/teams", reads.teams, methods=["GET"]),
        Route("/v1/history", reads.recent, methods=["GET"]),
        Route("/v1/whoami", whoami, methods=["GET"]),
    ]


class ClusterReads:
    def __init__(self, api: ApiContext) -> None:
        self.api = api

    async def inventory(self, request: Request) -> Response:
        api = self.api

        def read() -> Response:
            nodes = [NodeView.from_json(n) for n in service_inventory(api.service)]
            if api.usage is not None:
                nodes = with_utilisation(nodes, api.usage.utilisation())
            return answer(Inventory(tuple(inventory_for(nodes, caller_of(request.scope)))))

        return await run_in_threadpool(read)

    async def status(self, request: Request) -> Response:
        api, caller = self.api, caller_of(request.scope)

        def read() -> Response:  # from memory: never waits long for the scheduler, never reads the store
            raw, teams = api.service.status_and_owners()
            out = Status.from_json(status_view(raw, caller, teams))
            out = replace(out, **api.ha_status()) if api.ha_status is not None else out
            return answer(replace(out, nomad_address=api.nomad_address) if api.nomad_address else out)

        return await run_in_threadpool(read)

    async def teams(self, request: Request) -> Response:
        service, caller = self.api.service, caller_of(request.scope)

        def read() -> Response:
            live = service.store.list([EntryState.QUEUED, EntryState.ADMITTED, EntryState.RUNNING,
                                       EntryState.PREEMPTING])
            with service._lock:  # reads only: the usage and the inventory at one instant
                usage = dict(service.ledger.team_usage())
                capacity = capacity_gpu(service.ledger)
            rows = teams_view(live, usage, service.settings.fair, capacity)
            return answer(Teams(round(capacity, 3), tuple(teams_for(rows, caller))))

        return await run_in_threadpool(read)

    async def recent(self, request: Request) -> Response:
        data = await run_in_threadpool(self.api.history.to_json, time.time())
        return answer(payloads.History.from_json(data))


async def whoami(request: Request) -> Response:
    caller = caller_of(request.scope)
    return answer(Whoami(team=caller.team, admin=caller.admin, user=caller.user))
