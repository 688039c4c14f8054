"""Reclaim: a team of a cohort takes back the quota it lent (docs/cohorts.md).

A waiting job is owed capacity when its team is in a cohort and the job fits within the team's quota. If
it does not fit because borrowers hold the devices, the borrowers' work is stopped, newest first and never
more than each borrows (domain/cohorts.py `reclaim_victims`), on the one node where the fewest
GPU-equivalents must stop. It runs through the same machinery as preemption (domain/preemption.py's
`Preemption`, the service's victims stopping with their grace and the preemptor holding the node), with
other guards: `min_runtime` and `preempt_after` do not apply (a lender's quota is guaranteed), and
`max_preemptions` does not protect borrowed work. Under `borrow_requires: any`, borrowed work that is not
preemptible is never a victim: the lender waits for it to end.

Pure: the running attempts, the waiting jobs (the cycle's order) and the ledger in, the plans out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from nomad_gpu.domain.cohorts import EPS, Held, borrowed, reclaim_victims
from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.policies import Policy
from nomad_gpu.domain.preemption import Preemption, Running, Waiting, fits_without

RECLAIM = "reclaim"
"""The `why` of a reclaim's plan."""


def owed(job_team: Team, need: float, usage: Mapping[Team, float], fair: FairShareConfig) -> bool:
    """Whether a job of `job_team` needing `need` is within the quota of a team of a cohort."""
    policy = fair.team(job_team)
    return (policy.cohort is not None and policy.quota_gpu is not None
            and usage.get(job_team, 0.0) + need <= policy.quota_gpu + EPS)


def plan_reclaims(waiting: Sequence[Waiting], running: Mapping[EntryId, Running], ledger: Ledger, *,
                  fair: FairShareConfig, fit_policy: Policy, busy_nodes: Iterable[NodeId] = (),
                  busy_entries: Iterable[EntryId] = (), limit: int = 8) -> tuple[Preemption, ...]:
    """Reclaims to start now, in the order of `waiting`, at most one per node and per lender's job; what a
    plan takes is counted gone for the next, so two lenders never take the same borrowed GPU twice."""
    usage = dict(ledger.team_usage())
    if not any(borrowed(t, usage, fair) > EPS for t in usage):
        return ()  # the usual case: nobody runs on lent quota, so nothing is owed back
    nodes_taken, busy, chosen = set(busy_nodes), set(busy_entries), []
    taken: set[EntryId] = set()
    for w in [w for w in waiting if w.job.entry not in busy and owed(w.job.team, w.job.gpu_equivalents, usage,
                                                                        fair)][:limit]:
        by_node: dict[NodeId, list[Held]] = {}
        for e, r in sorted(running.items()):
            if e in taken or r.team == w.job.team or not r.preemptible or e not in ledger:
                continue
            nodes = {p.node for p in ledger.get(e).placements}
            if len(nodes) == 1:
                by_node.setdefault(next(iter(nodes)), []).append(Held(e, r.team, ledger.get(e).gpu_equivalents,
                                                                      r.started_at))
        best: tuple[float, NodeId, tuple[Held, ...]] | None = None
        for node, held in sorted(by_node.items()):
            nf = ledger.index.get(node)
            if node in nodes_taken or nf is None or not nf.offered or not w.job.places_on(nf.node):
                continue
            room = 0.0 if nf.node.migs else sum(nf.gpu_free.values()) / 1000  # MIG: left to the fitter alone
            if room + sum(h.gpus for h in held) + EPS < w.job.gpu_equivalents and not nf.node.migs:
                continue  # even every borrowed job there with what is free is too little
            victims = reclaim_victims(w.job.team, held, usage, fair, fits_without(w.job, node, ledger, fit_policy))
            if victims:  # None: the borrowed work there cannot make room; (): it fits already
                cost = sum(v.gpus for v in victims)
                if best is None or cost < best[0] - EPS:
                    best = (cost, node, victims)
        if best is None:
            continue
        _cost, node, victims = best
        chosen.append(Preemption(w.job.entry, node, tuple(v.entry for v in victims), RECLAIM))
        nodes_taken.add(node)
        for v in victims:
            taken.add(v.entry)
            usage[v.team] = usage.get(v.team, 0.0) - v.gpus
        usage[w.job.team] = usage.get(w.job.team, 0.0) + w.job.gpu_equivalents
    return tuple(chosen)
