"""Summaries across entries: the caller's sweeps, and GPU accounting over a window.

    GET /v1/sweeps     the caller's team's sweeps: id, name, team, trials, counts per state, submitted_at
                       (?state=running,queued keeps sweeps with a trial in one of those states)
    GET /v1/usage      GPU-hours, jobs, attempts, mean and p95 wait, failures, grouped ?by=team|class|kind|model
                       over ?since=30d (a duration back from now, or an epoch time); see `accounting.py`

Both read the store only (no Nomad), in the thread pool, and only what the caller's token may see: a
team token's list and report are its team's, an admin's are everyone's. Kept apart from `api.py`
(the routes every release has had) so that each summary is one small module with its own tests.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.api.payloads import SweepRow, Sweeps, UsageReport
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.access import caller_of
from nomad_gpu.service.accounting import GROUPINGS, Window, parse_since, usage_rows
from nomad_gpu.service.scheduler import SchedulerService
from nomad_gpu.store import EntryState, QueueEntry

DEFAULT_SINCE = "30d"


def sweep_rows(entries: list[QueueEntry], states: frozenset[str] | None = None) -> list[SweepRow]:
    """One row per sweep of ``entries`` (their trials), newest first; with ``states``, only sweeps that have
    a trial in one of them."""
    by_sweep: dict[str, list[QueueEntry]] = {}
    for e in entries:
        if e.sweep:
            by_sweep.setdefault(e.sweep, []).append(e)
    rows = []
    for sweep_id, trials in by_sweep.items():
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.state.value] = counts.get(t.state.value, 0) + 1
        if states is not None and not states & set(counts):
            continue
        first = min(trials, key=lambda t: t.id)
        name = first.name.rsplit("-t", 1)[0] if "-t" in first.name else first.name
        rows.append(SweepRow(id=sweep_id, name=name, team=first.team, trials=len(trials), states=counts,
                             submitted_at=min(t.submitted_at for t in trials)))
    rows.sort(key=lambda r: (-r.submitted_at, r.id))
    return rows


def _states(raw: str | None) -> frozenset[str] | None:
    if not raw:
        return None
    known = {s.value for s in EntryState}
    wanted = frozenset(s.strip() for s in raw.split(",") if s.strip())
    if unknown := sorted(wanted - known):
        raise InvalidRequest(f"unknown state {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return wanted


def list_routes(service: SchedulerService, clock: Callable[[], float] | None = None) -> list[Route]:
    now = clock or service.clock

    async def sweeps(request: Request) -> Response:
        caller = caller_of(request.scope)
        states = _states(request.query_params.get("state"))

        def read() -> Response:
            entries = caller.visible(service.store.list(None))
            return JSONResponse(Sweeps(tuple(sweep_rows(entries, states))).to_json())

        return await run_in_threadpool(read)

    async def usage(request: Request) -> Response:
        caller = caller_of(request.scope)
        by = request.query_params.get("by") or "team"
        if by not in GROUPINGS:
            raise InvalidRequest(f"by must be one of {', '.join(GROUPINGS)}, not {by!r}")
        until = now()
        try:
            since = parse_since(request.query_params.get("since") or DEFAULT_SINCE, until)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc

        def read() -> Response:
            entries = caller.visible(service.store.list(None))
            rows = usage_rows(entries, Window(since, until), until, by)
            return JSONResponse(UsageReport(since=since, until=until, by=by, rows=tuple(rows)).to_json())

        return await run_in_threadpool(read)

    return [Route("/v1/sweeps", sweeps, methods=["GET"]), Route("/v1/usage", usage, methods=["GET"])]
