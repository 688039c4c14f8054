"""A sweep's routes: its progress, and cancelling every trial of it.

    GET    /v1/sweeps/{id}     a sweep's trials and their counts by state
    DELETE /v1/sweeps/{id}     drop its queued trials and stop its running ones

A team's token reads and cancels only its team's trials; a sweep with none of them is a 404. The list of
sweeps (`GET /v1/sweeps`) is a summary across entries: `listroutes.py`.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nomad_gpu.api.payloads import Entry, Sweep
from nomad_gpu.domain.errors import UnknownEntry
from nomad_gpu.service.admission.access import caller_of
from nomad_gpu.service.http.apicontext import ApiContext, answer


def sweep_routes(api: ApiContext) -> list[Route]:
    sweeps = SweepRoutes(api)
    return [Route("/v1/sweeps/{id}", sweeps.progress, methods=["GET"]),
            Route("/v1/sweeps/{id}", sweeps.cancel, methods=["DELETE"])]


class SweepRoutes:
    def __init__(self, api: ApiContext) -> None:
        self.api = api

    async def progress(self, request: Request) -> Response:
        api, caller, sweep_id = self.api, caller_of(request.scope), request.path_params["id"]

        def read() -> Response:
            entries = api.service.store.list(None, sweep=sweep_id, team=caller.team)
            if not entries:
                raise UnknownEntry(f"no sweep {sweep_id!r}")
            return answer(sweep_payload(sweep_id, [api.entry_payload(e) for e in entries]))

        return await run_in_threadpool(read)

    async def cancel(self, request: Request) -> Response:
        api, caller, sweep_id = self.api, caller_of(request.scope), request.path_params["id"]

        def cancel() -> Response:
            moved = [api.entry_payload(e) for e in api.service.cancel_sweep(sweep_id, team=caller.team)]
            return answer(sweep_payload(sweep_id, moved))

        return await run_in_threadpool(cancel)


def sweep_payload(sweep_id: str, trials: list[Entry]) -> Sweep:
    """A sweep's trials and their counts by state."""
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state] = counts.get(t.state, 0) + 1
    return Sweep(sweep_id, len(trials), counts, tuple(trials))
