"""Preemption (DESIGN 17): who may take whose GPUs back, under which guards, and on which node.

Pure, as the cycle is: the service calls `plan_preemptions` after a cycle with the heads that waited, the
running attempts (their class, priority, start and past preemptions) and the ledger. For each waiting job
that may preempt, the victims are chosen on one node by `domain/victims.py` (the minimal set), judged by
the cycle's own fitter over that node with the victims' reservations released, so whole GPUs, MIG
instances and shares are all judged by the code that admits them.

Who may be a victim: the same team only (across teams only work the borrowing policy counts as borrowed,
never otherwise, and nothing is borrowed yet); a class the preemptor's class `preempts`, or a lower
priority; and only a job that is preemptible (its spec's `preemptible:`, else its class's policy: serving
never). Guards: a victim has run at least `min_runtime` and was preempted fewer than `max_preemptions`
times; the preemptor has waited at least `preempt_after`. Each node hosts one preemption at a time, and a
preemptor has one at a time.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import NoFit
from nomad_gpu.domain.policies import Policy
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.domain.victims import Candidate, minimal_victims, preference

__all__ = ["DEFAULT_PREEMPTIBLE", "DEFAULT_PREEMPTS", "Preemptible", "Preemption", "PreemptionPolicy",
           "Running", "Waiting", "fits_without", "plan_preemptions"]


class Preemptible(enum.Enum):
    """A class's policy on being a victim (`classes.<c>.preemptible`)."""

    YES = "true"
    NO = "false"
    WITH_CHECKPOINT = "with_checkpoint"
    """Only a job that gives `checkpoint:` (it can save its state in its grace)."""


DEFAULT_PREEMPTS: Mapping[str, frozenset[str]] = MappingProxyType({
    "serving": frozenset({"exploratory", "hpo", "interactive"}),
    "training": frozenset({"exploratory", "hpo"}),
})
"""Which classes each class may preempt by default (docs/classes.md)."""
DEFAULT_PREEMPTIBLE: Mapping[str, Preemptible] = MappingProxyType({
    "serving": Preemptible.NO, "training": Preemptible.WITH_CHECKPOINT, "hpo": Preemptible.YES,
    "exploratory": Preemptible.YES, "interactive": Preemptible.YES,
})
"""Which classes may be victims by default: serving never; training only with a checkpoint grace."""
NODES_COMPARED = 8
"""Nodes with a victim set whose sets are compared for one waiting job (bounds a cycle's cost on a large fleet)."""
NEVER_A_VICTIM = "serving"
"""DESIGN 17: serving is never a victim, whatever a spec or a policy says."""


@dataclass(frozen=True)
class PreemptionPolicy:
    """The `preemption:` config block and the classes' `preempts` / `preemptible` keys."""

    enabled: bool = True
    min_runtime_s: float = 300.0
    max_preemptions: int = 3
    preempt_after_s: float = 30.0
    borrow_requires: str = "preemptible"
    """What work borrowed across teams must be to be taken back (read by the borrowing policy)."""
    preempts: Mapping[str, frozenset[str]] = field(default_factory=lambda: DEFAULT_PREEMPTS)
    preemptible: Mapping[str, Preemptible] = field(default_factory=lambda: DEFAULT_PREEMPTIBLE)

    def victim_allowed(self, cls: str | None, spec_says: bool | None, checkpoint: bool) -> bool:
        """Whether a job may be a victim at all: serving never; else its spec's `preemptible:`, else its
        class's policy; a job without a class is not preemptible."""
        if cls == NEVER_A_VICTIM:
            return False
        if spec_says is not None:
            return spec_says
        rule = self.preemptible.get(cls) if cls is not None else None
        return rule is Preemptible.YES or (rule is Preemptible.WITH_CHECKPOINT and checkpoint)

    def reason_to_preempt(self, preemptor: Waiting, victim: Running) -> str | None:
        """`class` or `priority` when `preemptor` may take `victim`'s GPUs (guards aside); None otherwise."""
        if not self.enabled or preemptor.job.team != victim.team or not victim.preemptible:
            return None
        if victim.cls is not None and victim.cls in self.preempts.get(preemptor.cls or "", frozenset()):
            return "class"
        if preemptor.job.priority > victim.priority:
            return "priority"
        return None

    def guard(self, victim: Running, now: float) -> str | None:
        """Why `victim` is protected now (min_runtime, max_preemptions); None when it is not."""
        if now - victim.started_at < self.min_runtime_s:
            return "min_runtime"
        if victim.preemptions >= self.max_preemptions:
            return "max_preemptions"
        return None


@dataclass(frozen=True)
class Running:
    """A running attempt, as preemption sees it."""

    entry: EntryId
    team: Team
    cls: str | None
    priority: int
    started_at: float
    preemptible: bool
    """`PreemptionPolicy.victim_allowed` for its spec."""
    preemptions: int = 0
    """Times it was preempted already."""


@dataclass(frozen=True)
class Waiting:
    """A job the cycle could not admit, and since when it has waited."""

    job: JobRequest
    cls: str | None
    waited_since: float


@dataclass(frozen=True)
class Preemption:
    """Stop `victims` on `node` so that `preemptor` fits there."""

    preemptor: EntryId
    node: NodeId
    victims: tuple[EntryId, ...]
    why: str
    """`class` or `priority`: the rule that allowed every victim (`class` when any victim is by class)."""


def plan_preemptions(waiting: Sequence[Waiting], running: Mapping[EntryId, Running], ledger: Ledger, *,
                     policy: PreemptionPolicy, fit_policy: Policy, now: float,
                     held: Mapping[EntryId, frozenset[NodeId]] | None = None, busy_entries: Iterable[EntryId] = (),
                     limit: int = 8) -> tuple[Preemption, ...]:
    """Preemptions to start now, in the order of `waiting` (the cycle's own), at most one per node and per
    preemptor. `held`: the cycle's holds (a node held for one job is not preempted on for another; its own
    hold does not keep a starving head off its node); `busy_entries`: preemptors already waiting for their
    victims. At most `limit` waiting jobs are looked at."""
    if not policy.enabled:
        return ()
    holds = held or {}
    nodes_taken: set[NodeId] = set()
    busy, chosen = set(busy_entries), []
    victims_taken: set[EntryId] = set()
    on_node = _one_node_each(running, ledger)
    found_none: set[object] = set()
    """Shapes (with who asks) that found no node: one like it later in the cycle finds none either."""
    for w in [w for w in waiting if w.job.entry not in busy][:limit]:
        if now - w.waited_since < policy.preempt_after_s:
            continue
        j = w.job
        shape = (j.asks, j.team, w.cls, j.priority, j.datacenters, j.node_pool, j.one_node, j.avoid_nodes, j.drivers)
        if shape in found_none:
            continue
        allowed = {e: why for e, r in running.items() if e not in victims_taken and policy.guard(r, now) is None
                   and (why := policy.reason_to_preempt(w, r)) is not None}
        if not allowed:
            continue
        others = {n for e, nodes in holds.items() if e != w.job.entry for n in nodes}
        found = _on_best_node(w.job, allowed, on_node, running, ledger, fit_policy, nodes_taken | others)
        if found is None:
            found_none.add(shape)
            continue
        node, victims = found
        why = "class" if any(allowed[v] == "class" for v in victims) else "priority"
        chosen.append(Preemption(w.job.entry, node, victims, why))
        nodes_taken.add(node)
        victims_taken.update(victims)
    return tuple(chosen)


def _one_node_each(running: Mapping[EntryId, Running], ledger: Ledger) -> dict[NodeId, list[EntryId]]:
    """The running attempts by node, in ID order: only those on one node (a victim is stopped whole)."""
    by_node: dict[NodeId, list[EntryId]] = {}
    for entry in sorted(running):
        if entry in ledger:
            nodes = {p.node for p in ledger.get(entry).placements}
            if len(nodes) == 1:
                by_node.setdefault(next(iter(nodes)), []).append(entry)
    return by_node


def _on_best_node(job: JobRequest, allowed: Mapping[EntryId, str], on_node: Mapping[NodeId, list[EntryId]],
                  running: Mapping[EntryId, Running], ledger: Ledger, fit_policy: Policy,
                  taken: set[NodeId]) -> tuple[NodeId, tuple[EntryId, ...]] | None:
    """The node whose minimal victim set is the most preferred (victims.preference), ties by node ID, among
    the first `NODES_COMPARED` nodes (in ID order) where one exists: a large fleet is not searched whole."""
    best: tuple[tuple[object, ...], NodeId, tuple[EntryId, ...]] | None = None
    compared = 0
    for node, on in sorted(on_node.items()):
        entries = [e for e in on if e in allowed]
        if not entries:
            continue
        nf = ledger.index.get(node)
        if node in taken or nf is None or not nf.offered or node in job.avoid_nodes or not job.places_on(nf.node):
            continue
        candidates = [Candidate(e, ledger.get(e).gpu_equivalents, running[e].priority, running[e].started_at)
                      for e in entries]
        # what must be freed at least, in GPU-equivalents (MIG nodes: left to the fitter alone)
        need = 0.0 if nf.node.migs else max(0.0, job.gpu_equivalents - sum(nf.gpu_free.values()) / 1000)
        if need > sum(c.gpus for c in candidates) + 1e-9:
            continue  # even every victim with what is free there is too little
        victims = minimal_victims(candidates, fits_without(job, node, ledger, fit_policy), need=need)
        if not victims:  # None: even all of them would not do; (): it fits already (the cycle will admit it)
            continue
        key = (*preference(victims), node)
        if best is None or key < best[0]:
            best = (key, node, tuple(v.entry for v in victims))
        compared += 1
        if compared >= NODES_COMPARED:
            break
    return None if best is None else (best[1], best[2])


def fits_without(job: JobRequest, node: NodeId, ledger: Ledger,
                  fit_policy: Policy) -> Callable[[frozenset[EntryId]], bool]:
    """`fits(victims)`: whether `job` fits on `node` once the victims' reservations are released there."""
    nf = ledger.index.get(node)
    assert nf is not None
    held = [(e, p) for e in sorted(ledger.entries_on(node)) for p in ledger.get(e).placements if p.node == node]
    ctx = FitContext(fit_policy, per_class_limit=None)

    def fits(victims: frozenset[EntryId]) -> bool:
        index = FreeIndex()
        index.put(NodeFree.of(nf.node, [p for e, p in held if e not in victims]))
        return not isinstance(Fitter(index, ctx).fit_job(job), NoFit)

    return fits
