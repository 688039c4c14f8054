"""A replay of teams that take turns being busy, through the service's own cycle: what lending idle quota
buys, and what taking it back costs (docs/cohorts.md).

The trace's tasks are dealt to teams by time window: in window k, team k mod n is the busy one and gets
`busy_share` of the tasks, the others split the rest (seeded). Each team's quota is an equal part of the
sampled fleet. Three ways to run the same tasks:
  - `hard`: quotas are walls (no cohort), as before cohorts;
  - `none`: no quotas at all (a busy team takes everything it can, and keeps it until its tasks end);
  - `cohort`: every team in one cohort, lending all its unused quota and borrowing up to the whole fleet;
    a team below its quota whose task does not fit takes its capacity back from the borrowers
    (domain/cohorts.py `reclaim_victims`): the victims stop after their grace, holding their devices until
    then, and the lender's task is placed on what they free before anything else; a victim is queued again
    with its age kept and its whole run time to do again (the time it ran is lost work).
Every task is preemptible (so it may borrow) with a checkpoint grace of `grace_s`, a stated assumption.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nomad_gpu.domain.cohorts import room
from nomad_gpu.domain.cycle import Admit, CycleConfig, run_cycle
from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.policies import Policy, get_policy
from nomad_gpu.domain.preemption import Running, Waiting
from nomad_gpu.domain.reclaim import owed, plan_reclaims
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.sim.replay import sample_nodes
from nomad_gpu.sim.trace import Trace, TracePod

MODES = ("hard", "none", "cohort")
LOOKED_AT = 8
"""Waiting tasks looked at for a reclaim per event, as the service does (service/loops/preemption.py)."""
EPS = 1e-9


@dataclass(frozen=True)
class CohortConfig:
    teams: int = 3
    busy_share: float = 0.8
    windows: int = 12
    """The trace's span is cut into this many windows; the busy team changes at each."""
    speedup: float = 2000.0
    node_fraction: float = 0.2
    seed: int = 42
    grace_s: float = 60.0
    policy: str = "best-fit"


@dataclass
class TeamFigures:
    quota: float
    waits: list[float] = field(default_factory=list)
    waits_within_quota: list[float] = field(default_factory=list)
    """Waits of the tasks started with the team at or under its quota (never on lent capacity)."""
    reclaim_waits: list[float] = field(default_factory=list)
    """Submission to start of the tasks that took capacity back."""
    gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    preempted: int = 0
    never_started: int = 0


@dataclass
class CohortResult:
    mode: str
    config: CohortConfig
    gpus: int
    teams: dict[str, TeamFigures]
    makespan_s: float = 0.0
    alloc_pct: float = 0.0
    """Time-weighted mean share of the fleet's GPU-equivalents held, from the first arrival to the last."""
    max_preemptions: int = 0

    def to_json(self) -> dict[str, Any]:
        def pct(xs: list[float], q: float) -> float | None:
            return round(float(np.percentile(xs, q)), 1) if xs else None
        return {"mode": self.mode, "seed": self.config.seed, "gpus": self.gpus, "alloc_pct": self.alloc_pct,
                "max_preemptions": self.max_preemptions, "makespan_s": round(self.makespan_s, 1),
                "teams": {t: {"quota_gpu": f.quota, "started": len(f.waits), "never_started": f.never_started,
                              "wait_p50": pct(f.waits, 50), "wait_p95": pct(f.waits, 95),
                              "within_quota_p95": pct(f.waits_within_quota, 95),
                              "reclaim_p50": pct(f.reclaim_waits, 50), "reclaim_p95": pct(f.reclaim_waits, 95),
                              "reclaims": len(f.reclaim_waits), "gpu_hours": round(f.gpu_s / 3600, 2),
                              "lost_gpu_hours": round(f.lost_gpu_s / 3600, 3), "preempted": f.preempted}
                          for t, f in self.teams.items()}}


def deal(trace: Trace, config: CohortConfig) -> list[tuple[float, TracePod, Team]]:
    """The tasks that ran, with their arrival (compressed) and their team."""
    ran = [p for p in trace.pods if p.runtime_s is not None and p.gpu is not None]
    ran.sort(key=lambda p: p.creation_time)
    if not ran:
        return []
    first, last = ran[0].creation_time, ran[-1].creation_time
    width = max((last - first) / config.windows, 1e-9)
    rnd = random.Random(config.seed)
    out = []
    for p in ran:
        busy = int(min((p.creation_time - first) / width, config.windows - 1)) % config.teams
        if rnd.random() < config.busy_share or config.teams == 1:
            team = busy
        else:
            team = rnd.choice([t for t in range(config.teams) if t != busy])
        out.append(((p.creation_time - first) / config.speedup, p, Team(f"team{team}")))
    return out


def fair_config(mode: str, teams: list[Team], quota: float, fleet: float) -> FairShareConfig:
    if mode == "none":
        return FairShareConfig()
    if mode == "hard":
        return FairShareConfig(teams={t: TeamPolicy(quota_gpu=quota) for t in teams})
    return FairShareConfig(teams={t: TeamPolicy(quota_gpu=quota, borrow_gpu=fleet, cohort="all") for t in teams})


@dataclass
class _Run:
    ledger: Ledger
    cycle: CycleConfig
    fit_policy: Policy
    running: dict[EntryId, tuple[float, float, Team, TracePod, float]] = field(default_factory=dict)
    """entry -> (started, ends, team, pod, submitted)"""
    stopping: dict[EntryId, EntryId] = field(default_factory=dict)
    """victim -> the lender's entry it stops for"""


def run_cohorts(trace: Trace, mode: str, config: CohortConfig = CohortConfig()) -> CohortResult:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    inventory = sample_nodes(trace, config.node_fraction, config.seed)
    gpus = sum(len(n.gpus) for n in inventory)
    teams = [Team(f"team{k}") for k in range(config.teams)]
    quota = gpus / config.teams
    fair = fair_config(mode, teams, quota, float(gpus))
    state = _Run(Ledger(inventory), CycleConfig(policy=config.policy, fair=fair, borrow_requires="preemptible"),
                 get_policy(config.policy))
    figures = {str(t): TeamFigures(quota if mode != "none" else 0.0) for t in teams}
    arrivals = deque(deal(trace, config))
    span = arrivals[-1][0] if arrivals else 0.0
    queue: dict[EntryId, tuple[float, JobRequest, TracePod]] = {}
    needs: dict[EntryId, float] = {}
    ends: list[tuple[float, int, EntryId]] = []  # (time, kind 0=end 1=grace over, entry)
    preemptions: Counter[EntryId] = Counter()
    reclaiming: dict[EntryId, tuple[NodeId, frozenset[EntryId]]] = {}
    held_s, last_t, used = 0.0, 0.0, 0.0
    n = 0
    now = 0.0
    while arrivals or state.running or queue:
        nxt = min(arrivals[0][0] if arrivals else float("inf"), ends[0][0] if ends else float("inf"))
        if nxt == float("inf"):
            break  # what is left can never start
        now = nxt
        if now <= span:
            held_s += used * (now - last_t)
            last_t = now
        while ends and ends[0][0] <= now:
            _, kind, entry = heapq.heappop(ends)
            if kind == 0 and entry in state.running and entry not in state.stopping:
                started, _end, team, pod, _sub = state.running.pop(entry)
                state.ledger.release(entry)
                figures[team].gpu_s += (now - started) * _gpus(pod)
            elif kind == 1 and entry in state.stopping:  # a victim's grace is over: requeued
                lender = state.stopping.pop(entry)
                started, _end, team, pod, submitted = state.running.pop(entry)
                state.ledger.release(entry)
                figures[team].gpu_s += (now - started) * _gpus(pod)
                figures[team].lost_gpu_s += (now - started) * _gpus(pod)
                figures[team].preempted += 1
                preemptions[entry] += 1
                queue[entry] = (submitted, _job(entry, team, pod, submitted), pod)
                if not any(v == lender for v in state.stopping.values()) and lender in queue:
                    _admit_first(state, lender, queue, figures, now, reclaiming, ends)
        while arrivals and arrivals[0][0] <= now:
            at, pod, team = arrivals.popleft()
            entry = EntryId(f"t{n}")
            n += 1
            queue[entry] = (at, _job(entry, team, pod, at), pod)
            needs[entry] = _gpus(pod)
        if queue:
            # a job its quota refuses now stays refused for the whole cycle (use only grows inside one), so
            # leaving it out decides exactly as the cycle would, without sorting the blocked part of the queue
            usage = state.ledger.team_usage()
            rooms = {t: room(t, usage, fair, preemptible=True) + EPS for t in teams}
            waiting = [q[1] for e, q in queue.items() if e not in reclaiming and needs[e] <= rooms[q[1].team]]
            got = run_cycle(state.ledger, waiting, now=now, config=state.cycle)
            for d in got.decisions:
                if isinstance(d, Admit):
                    _started(state, d.entry, queue, figures, now, ends)
            if mode == "cohort":
                _reclaim(state, queue, reclaiming, figures, now, ends, config.grace_s)
        used = sum(state.ledger.team_usage().values())
    for _at, job, _pod in queue.values():
        figures[job.team].never_started += 1
    alloc = 100.0 * held_s / (span * gpus) if span > 0 and gpus else 0.0
    return CohortResult(mode, config, gpus, figures, makespan_s=now, alloc_pct=round(alloc, 2),
                        max_preemptions=max(preemptions.values(), default=0))


def _gpus(pod: TracePod) -> float:
    g = pod.gpu
    return g.gpu_equivalents if g is not None else 0.0


def _job(entry: EntryId, team: Team, pod: TracePod, submitted: float) -> JobRequest:
    return JobRequest(entry, team, (pod.to_ask(),), submitted_at=submitted, preemptible=True)


def _started(state: _Run, entry: EntryId, queue: dict[EntryId, tuple[float, JobRequest, TracePod]],
             figures: Mapping[str, TeamFigures], now: float, ends: list[tuple[float, int, EntryId]]) -> None:
    at, job, pod = queue.pop(entry)
    team = figures[job.team]
    team.waits.append(now - at)
    if state.ledger.team_usage().get(job.team, 0.0) <= team.quota + EPS:
        team.waits_within_quota.append(now - at)
    runtime = pod.runtime_s or 0.0
    state.running[entry] = (now, now + runtime, job.team, pod, at)
    heapq.heappush(ends, (now + runtime, 0, entry))


def _admit_first(state: _Run, lender: EntryId, queue: dict[EntryId, tuple[float, JobRequest, TracePod]],
                 figures: Mapping[str, TeamFigures], now: float,
                 reclaiming: dict[EntryId, tuple[NodeId, frozenset[EntryId]]],
                 ends: list[tuple[float, int, EntryId]]) -> None:
    """The lender's task goes first onto what its victims freed, before any cycle offers it to others."""
    node, _victims = reclaiming.pop(lender)
    job = replace(queue[lender][1], avoid_nodes=frozenset(n.id for n in state.ledger.inventory if n.id != node))
    got = run_cycle(state.ledger, [job], now=now, config=state.cycle)
    if got.admitted:
        figures[job.team].reclaim_waits.append(now - queue[lender][0])
        _started(state, lender, queue, figures, now, ends)


def _reclaim(state: _Run, queue: dict[EntryId, tuple[float, JobRequest, TracePod]],
             reclaiming: dict[EntryId, tuple[NodeId, frozenset[EntryId]]], figures: Mapping[str, TeamFigures],
             now: float, ends: list[tuple[float, int, EntryId]], grace_s: float) -> None:
    """The service's own planner (domain/reclaim.py) on the waiting tasks, oldest first; the victims stop
    after their grace, holding their devices until then."""
    fair = state.cycle.fair
    usage = state.ledger.team_usage()
    waiting = [Waiting(job, None, at) for _e, (at, job, _pod) in sorted(queue.items(), key=lambda q: (q[1][0], q[0]))
               if job.entry not in reclaiming and owed(job.team, job.gpu_equivalents, usage, fair)][:LOOKED_AT]
    if not waiting:
        return
    running = {e: Running(e, r[2], None, 50, r[0], True) for e, r in state.running.items() if e not in state.stopping}
    busy = {node for node, _victims in reclaiming.values()}
    for plan in plan_reclaims(waiting, running, state.ledger, fair=fair, fit_policy=state.fit_policy,
                              busy_nodes=busy, limit=LOOKED_AT):
        reclaiming[plan.preemptor] = (plan.node, frozenset(plan.victims))
        for victim in plan.victims:
            state.stopping[victim] = plan.preemptor
            heapq.heappush(ends, (now + grace_s, 1, victim))
