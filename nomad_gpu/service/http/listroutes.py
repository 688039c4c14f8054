"""Summaries across entries: the caller's sweeps, and GPU accounting over a window.

    GET /v1/sweeps     the caller's team's sweeps: id, name, team, trials, counts per state, submitted_at
                       (?state=running,queued keeps sweeps with a trial in one of those states)
    GET /v1/usage      GPU-hours, jobs, attempts, mean and p95 wait, failures, grouped ?by=team|class|kind|model
                       over ?since=30d (a duration back from now, or an epoch time); see `accounting/report.py`

Both read the store only (no Nomad), in the thread pool, and only what the caller's token may see: a
team token's list and report are its team's, an admin's are everyone's. Both are counted in SQL on a
team's index, never by decoding entries: another team's history costs a team's view nothing (issue 31,
item 4). Kept apart from `api.py`
(the routes every release has had) so that each summary is one small module with its own tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.api.payloads import UNSET, SweepRow, Sweeps, UsageReport, UsageRow
from nomad_gpu.domain.cohorts import cohort_quotas
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.accounting.idleaccounts import IdleAccounts, IdleTotals
from nomad_gpu.service.accounting.report import GROUPINGS, borrowed_hours, parse_since
from nomad_gpu.service.admission.access import caller_of
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState
from nomad_gpu.store.sweeplist import SweepSummary

DEFAULT_SINCE = "30d"


def sweep_rows(sweeps: Iterable[SweepSummary], states: frozenset[str] | None = None) -> list[SweepRow]:
    """One row per sweep, newest first; with ``states``, only sweeps that have a trial in one of them."""
    rows = []
    for s in sweeps:
        if states is not None and not states & set(s.states):
            continue
        name = s.first_name.rsplit("-t", 1)[0] if "-t" in s.first_name else s.first_name
        rows.append(SweepRow(id=s.id, name=name, team=s.team, trials=s.trials, states=dict(s.states),
                             submitted_at=s.submitted_at))
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


def list_routes(service: SchedulerService, clock: Callable[[], float] | None = None, *,
                idle: IdleAccounts | None = None) -> list[Route]:
    """``idle``: idle reclaim's accounts, whose idle and returned GPU-hours the usage rows gain."""
    lists = Summaries(service, clock or service.clock, idle)
    return [Route("/v1/sweeps", lists.sweeps, methods=["GET"]), Route("/v1/usage", lists.usage, methods=["GET"])]


class Summaries:
    def __init__(self, service: SchedulerService, clock: Callable[[], float], idle: IdleAccounts | None) -> None:
        self.service = service
        self.now = clock
        self.idle = idle

    async def sweeps(self, request: Request) -> Response:
        service, caller = self.service, caller_of(request.scope)
        states = _states(request.query_params.get("state"))

        def read() -> Response:  # counted in SQL on the team's index: no other team's row is read
            sweeps = service.store.sweep_summaries(team=caller.team)
            return JSONResponse(Sweeps(tuple(sweep_rows(sweeps, states))).to_json())

        return await run_in_threadpool(read)

    async def usage(self, request: Request) -> Response:
        service, idle, caller = self.service, self.idle, caller_of(request.scope)
        by = request.query_params.get("by") or "team"
        if by not in GROUPINGS:
            raise InvalidRequest(f"by must be one of {', '.join(GROUPINGS)}, not {by!r}")
        until = self.now()
        try:
            since = parse_since(request.query_params.get("since") or DEFAULT_SINCE, until)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc

        def read() -> Response:  # summed in SQL from the compact usage record, on the team's index
            found = service.store.usage_report(by, since, until, until, team=caller.team)
            extra = idle.totals(by, since, until, caller.team) if idle is not None else {}
            quotas = cohort_quotas(service.settings.fair) if by == "team" else {}
            borrowed = borrowed_hours(service.store.usage_intervals(since, until, until, team=caller.team),
                                      quotas) if quotas else {}
            rows = tuple(UsageRow(key=r.key, gpu_hours=r.gpu_hours, jobs=r.jobs, attempts=r.attempts,
                                  mean_wait_s=r.mean_wait_s, p95_wait_s=r.p95_wait_s, failures=r.failures,
                                  idle_gpu_hours=(x := extra.get(r.key, IdleTotals())).idle_gpu_hours,
                                  reclaimed_gpu_hours=x.reclaimed_gpu_hours, reclaims=x.reclaims,
                                  preemptions=r.preemptions, lost_gpu_hours=r.lost_gpu_hours,
                                  borrowed_gpu_hours=borrowed.get(r.key, 0.0) if r.key in quotas else UNSET)
                         for r in found)
            return JSONResponse(UsageReport(since=since, until=until, by=by, rows=rows).to_json())

        return await run_in_threadpool(read)
