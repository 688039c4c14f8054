"""Preemption in the queue replay: which waiting task may take GPUs back, from whom, and at what cost.

The replay (replay.py) asks this module after each cycle. A task whose class may preempt others and
that has waited at least `preempt_after_s` is offered, oldest first, the minimal victim set on one node
(`domain.victims.minimal_victims`, the chooser the service uses too), among the running tasks its
class may preempt that are preemptible, have run at least `min_runtime_s` and were preempted fewer than
`max_preemptions` times. "Fits" is the service's own fitter on that node with the victims' placements
gone, so whole GPUs, MIG instances and shares are judged as the cycle judges them. Among nodes the set
the chooser prefers wins (fewest GPU-equivalents, fewest victims, lowest priority, latest start), then
the node ID.

A preemption hands the victims' devices to the preemptor at once in the books (nobody else may take
them), but the preemptor starts only after the victims' checkpoint grace (the devices stay busy with
the victims until then); the victims are requeued then with their age kept and their whole run time to
do again: the time since their start, to the end of the grace, is counted as lost. Pure: no clock, no
randomness; the replay passes `now`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, InstanceId, NodeId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, NoFit
from nomad_gpu.domain.requests import AllocAsk, JobRequest
from nomad_gpu.domain.victims import Candidate, Victims, minimal_victims, preference

WITH_CHECKPOINT = "with_checkpoint"
_EPS = 1e-9
"""Times are sums of floats: a wake-up at `since + window` must count as the window passed."""
SERVING = "serving"


@dataclass(frozen=True)
class PreemptPolicy:
    """The classes' take-back rules and guards (the issue's defaults), and the grace each task gives."""

    preempts: Mapping[str, frozenset[str]] = field(default_factory=lambda: {
        "serving": frozenset({"exploratory", "hpo", "interactive"}),
        "training": frozenset({"exploratory", "hpo"}),
    })
    """Which classes each class may preempt."""
    preemptible: Mapping[str, bool | str] = field(default_factory=lambda: {
        "exploratory": True, "hpo": True, "interactive": True, "training": WITH_CHECKPOINT, "serving": False,
    })
    """Whether a class may be a victim: true, false or only `with_checkpoint`; a class not named is not."""
    min_runtime_s: float = 300.0
    max_preemptions: int = 3
    preempt_after_s: float = 30.0
    grace_s: float = 60.0
    """Every task's checkpoint grace: how long a victim holds its devices after the signal."""
    checkpoint: bool = True
    """Whether every task gives `checkpoint:` (the replay gives each trace task one)."""

    def __post_init__(self) -> None:
        for cls, victims in self.preempts.items():
            if cls in victims:
                raise ValueError(f"class {cls} may not preempt itself")
        for rule in self.preemptible.values():
            if rule not in (True, False, WITH_CHECKPOINT):
                raise ValueError(f"preemptible must be true, false or {WITH_CHECKPOINT}, got {rule!r}")
        if min(self.min_runtime_s, self.preempt_after_s, self.grace_s) < 0 or self.max_preemptions < 0:
            raise ValueError("durations and max_preemptions must be >= 0")

    def may_preempt(self, cls: str) -> bool:
        return bool(self.preempts.get(cls))

    def is_preemptible(self, cls: str) -> bool:
        rule = self.preemptible.get(cls, False)
        return rule is True or (rule == WITH_CHECKPOINT and self.checkpoint)

    def may_take(self, preemptor: str, victim: Attempt, now: float) -> bool:
        """Every guard: the class pair, the victim's class preemptible, its run time, its count."""
        return (victim.label in self.preempts.get(preemptor, frozenset()) and self.is_preemptible(victim.label)
                and now - victim.started_at >= self.min_runtime_s - _EPS and victim.preempted < self.max_preemptions)

    def waited_enough(self, since: float, now: float) -> bool:
        return now - since >= self.preempt_after_s - _EPS

    def next_offer(self, now: float, waiting_since: Iterable[float], running: Iterable[Attempt]) -> float:
        """When an offer could next find something new, with tasks that may preempt waiting since
        `waiting_since`: one of them reaches `preempt_after_s`, or a running attempt reaches
        `min_runtime_s` (releases are events of their own); inf when nothing waits."""
        since = list(waiting_since)
        if not since:
            return float("inf")
        soon = [at + self.preempt_after_s for at in since if not self.waited_enough(at, now)]
        soon += [a.started_at + self.min_runtime_s for a in running
                 if now - a.started_at < self.min_runtime_s - _EPS and self.is_preemptible(a.label)
                 and a.preempted < self.max_preemptions]
        return min(soon, default=float("inf"))


@dataclass(frozen=True)
class Attempt:
    """A running attempt of a task, as a possible victim."""

    entry: EntryId
    label: str
    started_at: float
    placements: tuple[AllocPlacement, ...]
    preempted: int = 0
    """Times this task was preempted before this attempt."""
    priority: int = 50

    @functools.cached_property
    def gpu_equivalents(self) -> float:
        return sum(p.gpu_equivalents for p in self.placements)

    @functools.cached_property
    def isolated(self) -> bool:
        """Holds a whole GPU or a MIG instance (what serving, never on a shared GPU, could take)."""
        return any(p.instance_ids and not p.is_share for p in self.placements)

    @functools.cached_property
    def node(self) -> NodeId | None:
        """Its one node; None for CPU-only work or a gang over several nodes (never a victim here)."""
        nodes = {p.node for p in self.placements if p.instance_ids}
        return next(iter(nodes)) if len(nodes) == 1 else None


@dataclass(frozen=True)
class Preemption:
    preemptor: EntryId
    node: NodeId
    victims: tuple[EntryId, ...]
    placements: tuple[AllocPlacement, ...]
    """The preemptor's, on the node once the victims are gone."""


Candidates = Mapping[NodeId, Sequence[Candidate]]
NoVictims = dict[tuple[tuple[AllocAsk, ...], NodeId], tuple[NodeFree, frozenset[EntryId]]]
"""Per job shape and node, the node's state and candidates with which no victim set did: the same
shape on the same books and candidates fails again, so a later offer skips it."""


def candidates(running: Iterable[Attempt], label: str, policy: PreemptPolicy, now: float) -> Candidates:
    """The attempts a task of class `label` may preempt now, by node."""
    by_node: dict[NodeId, list[Candidate]] = {}
    for attempt in running:
        if attempt.node is not None and policy.may_take(label, attempt, now):
            by_node.setdefault(attempt.node, []).append(
                Candidate(attempt.entry, attempt.gpu_equivalents, attempt.priority, attempt.started_at))
    return by_node


def choose(ledger: Ledger, job: JobRequest, by_node: Candidates, ctx: FitContext,
           no_victims: NoVictims | None = None) -> Preemption | None:
    """The node and minimal victim set among `by_node` (`candidates`) that let `job` start, or None (no
    node where stopping them would make it fit). Nodes in `ctx.blocked` (held for another head) are
    skipped; `no_victims` remembers the nodes that failed, for the next offer."""
    need = job.gpu_equivalents
    best: tuple[tuple[object, ...], NodeId, Victims] | None = None
    for node_id in sorted(by_node):
        nf = ledger.node_free(node_id)
        if nf is None or not nf.offered or node_id in ctx.blocked or not job.places_on(nf.node):
            continue
        pool = by_node[node_id]
        short = need - _free_upper_bound(nf)
        if sum(c.gpus for c in pool) + 1e-9 < short:
            continue
        seen = frozenset(c.entry for c in pool)
        known = no_victims.get((job.asks, node_id)) if no_victims is not None else None
        if known is not None and known[0] is nf and known[1] == seen:
            continue
        victims = minimal_victims(pool, functools.partial(_fits_without, ledger, node_id, job, ctx),
                                  need=max(0.0, short))
        if not victims:  # None: no set does; (): it fits already (the cycle will place it)
            if no_victims is not None and victims is None:
                no_victims[(job.asks, node_id)] = (nf, seen)
            continue
        key = (*preference(victims), node_id)
        if best is None or key < best[0]:
            best = (key, node_id, victims)
    if best is None:
        return None
    _, node_id, victims = best
    gone = frozenset(v.entry for v in victims)
    placements = _fit_without(ledger, node_id, gone, job, ctx)
    assert placements is not None  # the chooser only returns sets that fit
    return Preemption(job.entry, node_id, tuple(sorted(gone)), placements)


def _free_upper_bound(nf: NodeFree) -> float:
    """At least the GPU-equivalents free on the node (a free MIG instance counted as a whole GPU), so
    `need - this` is a lower bound on what victims must free."""
    return sum(nf.gpu_free.values()) / MILLI_PER_GPU + sum(len(ids) for ids in nf.mig_free.values())


def _fits_without(ledger: Ledger, node_id: NodeId, job: JobRequest, ctx: FitContext,
                  gone: frozenset[EntryId]) -> bool:
    return _fit_without(ledger, node_id, gone, job, ctx) is not None


def _fit_without(ledger: Ledger, node_id: NodeId, gone: frozenset[EntryId], job: JobRequest,
                 ctx: FitContext) -> tuple[AllocPlacement, ...] | None:
    """The fitter's placement of `job` on the node once the entries in `gone` hold nothing there."""
    current = ledger.node_free(node_id)
    if current is None:
        return None
    held = [p for entry in sorted(ledger.entries_on(node_id)) if entry not in gone
            for p in ledger.get(entry).placements if p.node == node_id]
    index = FreeIndex()
    index.put(NodeFree.of(current.node, held))
    got = Fitter(index, FitContext(ctx.policy, ctx.demand, per_class_limit=None, slack=ctx.slack)).fit_job(job)
    return None if isinstance(got, NoFit) else got


def isolated_victim_available(running: Iterable[Attempt], label: str, policy: PreemptPolicy, now: float) -> bool:
    """Whether any running attempt that `label` may preempt now holds an isolated device."""
    return any(a.isolated and policy.may_take(label, a, now) for a in running)


@dataclass
class PreemptStats:
    """What preemption cost and gave in one replay."""

    preemptions: Counter[EntryId] = field(default_factory=Counter)
    """Times each victim was preempted."""
    preemptors: int = 0
    """Tasks that started on devices taken back for them."""
    lost_gpu_s: float = 0.0
    """GPU-seconds of victims' attempts from their start to the end of their grace."""
    delivered_gpu_s: float = 0.0
    """GPU-seconds of attempts that ran to their end."""
    serving_waited: set[EntryId] = field(default_factory=set)
    """Serving tasks offered to preemption (waited at least `preempt_after_s`)."""
    serving_isolated_victim: set[EntryId] = field(default_factory=set)
    """Of those, the ones for which an isolated, preemptible victim ran somewhere at some offer."""
    completed: set[EntryId] = field(default_factory=set)
    violations: int = 0
    """Placements that put serving on a shared GPU with another tenant, or a share beside serving."""
    _share_tenants: Counter[InstanceId] = field(default_factory=Counter)
    _serving_shared: set[InstanceId] = field(default_factory=set)

    @property
    def lost_pct(self) -> float:
        return 100.0 * self.lost_gpu_s / self.delivered_gpu_s if self.delivered_gpu_s else 0.0

    @property
    def max_per_victim(self) -> int:
        return max(self.preemptions.values(), default=0)

    @property
    def victims_unfinished(self) -> int:
        return sum(1 for entry in self.preemptions if entry not in self.completed)

    def placed(self, label: str, placements: Iterable[AllocPlacement]) -> None:
        """Count isolation violations as the placement is made (ledger order)."""
        for gpu in (p.shared_gpu for p in placements if p.is_share):
            if gpu is None:
                continue
            self._share_tenants[gpu] += 1
            if label == SERVING:
                self._serving_shared.add(gpu)
            if gpu in self._serving_shared and self._share_tenants[gpu] > 1:
                self.violations += 1

    def released(self, label: str, placements: Iterable[AllocPlacement]) -> None:
        for gpu in (p.shared_gpu for p in placements if p.is_share):
            if gpu is None:
                continue
            self._share_tenants[gpu] -= 1
            if label == SERVING:
                self._serving_shared.discard(gpu)


def ask_key(job: JobRequest) -> tuple[AllocAsk, ...]:
    """Jobs with the same asks find the same victims within one pass (the books change only on a
    preemption, which takes candidates away)."""
    return job.asks
