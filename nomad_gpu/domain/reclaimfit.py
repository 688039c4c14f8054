"""Whom an idle job's GPUs would go to: a take-back weighs the queue (DESIGN 17).

An idle job is stopped under `only_when_waiting` only while a waiting job would be admitted on the capacity
its stop frees: the first waiting job, in the cycle's own order, that its team's quota lets in and that
fits on the victim's nodes with the victim's placements given back (and everything else there still
held), and not on those nodes as they are now. A job that waits for quota, for a shape the freed capacity
does not offer, or for something other than capacity there, is no reason to stop anyone. Pure: the
ledger is read, never changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.ids import EntryId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import NoFit
from nomad_gpu.domain.policies import DEFAULT_POLICY, get_policy
from nomad_gpu.domain.requests import JobRequest


def freed_index(ledger: Ledger, victims: Iterable[EntryId], freed: bool = True) -> FreeIndex:
    """The victims' nodes as they would be once the victims' placements are given back (`freed`), or as
    they are now."""
    gone = frozenset(victims)
    nodes = {p.node for v in gone if v in ledger for p in ledger.get(v).placements}
    if not freed:
        gone = frozenset()
    index = FreeIndex()
    for node_id in sorted(nodes):
        node = ledger.inventory.nodes.get(node_id)
        if node is None:
            continue
        held = [p for e in sorted(ledger.entries_on(node_id)) if e not in gone
                for p in ledger.get(e).placements if p.node == node_id]
        index.put(NodeFree.of(node, held))
    return index


def beneficiary(ledger: Ledger, victims: Iterable[EntryId], waiting: Sequence[JobRequest],
                fair: FairShareConfig | None = None, policy: str = DEFAULT_POLICY) -> EntryId | None:
    """The first of `waiting` (in the cycle's order) that the victims' freed capacity would admit, or None."""
    gone = frozenset(victims)
    if not gone or not waiting:
        return None
    fair = fair or FairShareConfig()
    freed_by_team: dict[str, float] = {}
    for v in gone:
        if v in ledger:
            res = ledger.get(v)
            freed_by_team[res.team] = freed_by_team.get(res.team, 0.0) + res.gpu_equivalents
    fitter = Fitter(freed_index(ledger, gone), FitContext(get_policy(policy)))
    now = Fitter(freed_index(ledger, gone, freed=False), FitContext(get_policy(policy)))
    for job in waiting:
        if job.entry in gone or job.entry in ledger:
            continue
        quota = fair.team(job.team).quota_gpu
        in_use = ledger.team_usage().get(job.team, 0.0) - freed_by_team.get(job.team, 0.0)
        if quota is not None and in_use + job.gpu_equivalents > quota + 1e-9:
            continue
        if not isinstance(fitter.fit_job(job), NoFit) and isinstance(now.fit_job(job), NoFit):
            return job.entry  # it needs what the victims hold: what is free there already would not do
    return None
