"""The scheduling cycle: queue + ledger + usage + now -> admit(job, placements) | wait(job, reason).

Phases, as in Kueue, each a function with its inputs and outputs: `snapshot` (the candidates, the
policy and its demand, live holds, the starving jobs), then the jobs in order (`heads`: starving
jobs first; `rest_of`: priority, then fair share, then age), and for each `decide` (quota, fit,
holds; it writes only the cycle's `CycleState`) and `commit` (admissions reserved in the ledger at
once, so the next job sees them). Deterministic: the same inputs give the same decisions.

Head-of-line protection: when the oldest job of the top priority has waited past
`hol_threshold_s` and does not fit, nodes that could host it are held for it; nothing else is
placed there, so it is admitted after at most the completions of what already runs on them. The
nodes with the fewest allocations are held; a starving job that no node could host is skipped, so
it cannot take the protection away from the next one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from nomad_gpu.defaults import HOL_THRESHOLD_S
from nomad_gpu.domain.cohorts import quota_refusal
from nomad_gpu.domain.fairshare import FairShareConfig, UsageHistory
from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, NoFit, WaitReason
from nomad_gpu.domain.policies import DEFAULT_POLICY, Policy, get_policy, options
from nomad_gpu.domain.requests import AllocAsk, JobRequest
from nomad_gpu.domain.scoring import ScoreMemo


@dataclass(frozen=True)
class Admit:
    entry: EntryId
    team: Team
    placements: tuple[AllocPlacement, ...]


@dataclass(frozen=True)
class Wait:
    entry: EntryId
    reason: WaitReason
    detail: str

    def __str__(self) -> str:
        return str(NoFit(self.reason, self.detail))


Decision = Admit | Wait


@dataclass(frozen=True)
class CycleConfig:
    policy: str = DEFAULT_POLICY
    hol_threshold_s: float = HOL_THRESHOLD_S
    max_holds: int = 1
    per_class_limit: int | None = 4
    fair: FairShareConfig = field(default_factory=FairShareConfig)
    borrow_requires: str = "preemptible"
    """What may run past a team's quota on its cohort's lent capacity (domain/cohorts.py)."""


@dataclass(frozen=True)
class CycleResult:
    decisions: tuple[Decision, ...]
    holds: Mapping[EntryId, frozenset[NodeId]]
    """Nodes held for starving heads; pass back into the next cycle."""
    decision_s: tuple[float, ...] = ()
    """Seconds each decision took, when a `clock` was given (benchmarks only)."""

    @property
    def admitted(self) -> tuple[Admit, ...]:
        return tuple(d for d in self.decisions if isinstance(d, Admit))


_DEFAULT_CONFIG = CycleConfig()
_NO_USAGE = UsageHistory()


def order_queue(
    queue: Iterable[JobRequest], ledger: Ledger, usage: UsageHistory, fair: FairShareConfig
) -> Iterable[JobRequest]:
    """Jobs in decision order. Lazy: team standings are re-read after each admission."""
    by_prio: dict[int, dict[Team, list[JobRequest]]] = {}
    for job in queue:
        by_prio.setdefault(job.priority, {}).setdefault(job.team, []).append(job)
    for prio in sorted(by_prio, reverse=True):
        teams = by_prio[prio]
        for jobs in teams.values():
            jobs.sort(key=lambda j: (j.submitted_at, j.entry))
        pos = dict.fromkeys(teams, 0)
        use = ledger.team_usage()
        heap = [(usage.standing(t, use.get(t, 0.0), fair), t) for t in teams]
        heapq.heapify(heap)
        while heap:
            _, team = heapq.heappop(heap)
            jobs = teams[team]
            yield jobs[pos[team]]
            pos[team] += 1
            if pos[team] < len(jobs):
                heapq.heappush(heap, (usage.standing(team, ledger.team_usage().get(team, 0.0), fair), team))


@dataclass(frozen=True)
class Snapshot:
    """What a cycle decides on, fixed at its start: the candidates, the policy and its demand, the
    live holds and the starving heads."""

    queue: tuple[JobRequest, ...]
    """Candidates: each entry once (its first listing), none that already holds capacity."""
    policy: Policy
    demand: Demand | None
    holds: Mapping[EntryId, frozenset[NodeId]]
    starving: tuple[JobRequest, ...]
    memo: ScoreMemo
    """Scores by node state: one policy, one demand, so valid for this cycle."""


@dataclass
class CycleState:
    """What the decisions of one cycle learn and pass on to the next decision of it."""

    holds: dict[EntryId, frozenset[NodeId]]
    failed: dict[object, NoFit] = field(default_factory=dict)
    """Verdicts by job shape: capacity only shrinks inside a cycle, so what did not fit will not."""
    no_hold: set[object] = field(default_factory=set)
    """Shapes no node could be held for: held nodes only grow inside a cycle."""
    heads: set[EntryId] = field(default_factory=set)
    """Starving jobs already offered as heads (and so not again in queue order)."""


def run_cycle(
    ledger: Ledger,
    queue: Sequence[JobRequest],
    *,
    now: float,
    config: CycleConfig = _DEFAULT_CONFIG,
    usage: UsageHistory = _NO_USAGE,
    holds: Mapping[EntryId, frozenset[NodeId]] | None = None,
    demand: Demand | None = None,
    clock: Callable[[], float] | None = None,
) -> CycleResult:
    """One cycle, in Kueue's phases: snapshot, then for each job in order (starving heads first)
    decide and commit. Admissions are reserved in `ledger` before this returns.

    `clock` (a benchmark's seam; the core reads no clock of its own) times each decision."""
    snap = snapshot(ledger, queue, now=now, config=config, holds=holds or {}, demand=demand)
    state = CycleState(dict(snap.holds))
    decisions: list[Decision] = []
    timings: list[float] = []
    for job in _chain(heads(snap, ledger, config, state), rest_of(snap, ledger, usage, config, state)):
        if clock is None:
            decisions.append(commit(ledger, state, decide(job, snap, ledger, config, state)))
        else:
            t0 = clock()
            decisions.append(commit(ledger, state, decide(job, snap, ledger, config, state)))
            timings.append(clock() - t0)
    return CycleResult(tuple(decisions), dict(state.holds), tuple(timings))


def snapshot(ledger: Ledger, queue: Sequence[JobRequest], *, now: float, config: CycleConfig,
             holds: Mapping[EntryId, frozenset[NodeId]], demand: Demand | None) -> Snapshot:
    """The cycle's fixed inputs, from the queue and the ledger as they stand."""
    policy = get_policy(config.policy)
    # an entry already holding capacity, or listed twice, is not a candidate (first listing wins)
    unique: dict[EntryId, JobRequest] = {}
    for j in queue:
        if j.entry not in ledger:
            unique.setdefault(j.entry, j)
    jobs = tuple(unique.values())
    if demand is None and policy.uses_demand:
        demand = Demand.from_jobs(jobs)
    if demand is not None and demand.large and policy.uses_large_shapes:
        # large shapes weigh by the room the cluster has left for them, as the simulator weighs them
        demand = demand.scarce_on(ledger.index.nodes())
        # room for a large shape is kept only while waiting tasks of that shape would use all of it
        demand = demand.needed_now(ledger.index.nodes(), (a for j in jobs for a in j.asks))
    live = _live_holds(ledger, holds, unique)
    return Snapshot(jobs, policy, demand, live, tuple(_starving(jobs, now, config)), ScoreMemo())


def heads(snap: Snapshot, ledger: Ledger, config: CycleConfig, state: CycleState) -> Iterator[JobRequest]:
    """Starving jobs first, oldest first, until `max_holds` of them hold nodes or got in. One that
    no node could host gets no hold and must not use up a slot, or it would starve the next."""
    served = 0
    for job in snap.starving:
        if served >= config.max_holds:
            return
        state.heads.add(job.entry)
        yield job
        if job.entry in state.holds or job.entry in ledger:
            served += 1


def rest_of(snap: Snapshot, ledger: Ledger, usage: UsageHistory, config: CycleConfig,
            state: CycleState) -> Iterator[JobRequest]:
    """The other jobs in decision order (`order_queue`), read lazily after the heads."""
    return (j for j in order_queue(snap.queue, ledger, usage, config.fair) if j.entry not in state.heads)


@dataclass(frozen=True)
class Proposal:
    """An admission decided but not yet committed to the ledger."""

    entry: EntryId
    team: Team
    placements: tuple[AllocPlacement, ...]


def decide(job: JobRequest, snap: Snapshot, ledger: Ledger, config: CycleConfig,
           state: CycleState) -> Proposal | Wait:
    """Quota, then the fitter, then holds for a starving head that does not fit. Reads the ledger,
    writes only `state` (verdicts, holds)."""
    quota = config.fair.team(job.team).quota_gpu
    usage = ledger.team_usage()
    in_use = usage.get(job.team, 0.0)
    refusal = _quota_refusal(job, job.gpu_equivalents, usage, config)
    if refusal:
        return Wait(job.entry, WaitReason.QUOTA, refusal)
    holds = state.holds
    tiered = job.tiered
    # an ask with alternatives may take a dearer one only within what the team may hold (per alternative)
    slack = _ceiling(job, usage, config) - in_use - job.gpu_equivalents if quota is not None and tiered else None
    # capacity only shrinks inside a cycle, so a shape that did not fit will not fit later in it
    key = (job.asks, job.datacenters, job.node_pool, job.one_node, job.avoid_nodes, job.drivers,
           job.entry if job.entry in holds else None, slack)
    verdict = state.failed.get(key) or _fitter(snap, ledger, config, holds, job.entry, slack).fit_job(job)
    if isinstance(verdict, NoFit):
        state.failed[key] = verdict
        if job.entry in state.heads and job.entry not in holds and key not in state.no_hold:
            nodes = _choose_hold(ledger, job, frozenset(n for ns in holds.values() for n in ns))
            if nodes:
                holds[job.entry] = nodes
            else:
                state.no_hold.add(key)  # held nodes only grow inside a cycle: the same shape finds none
        if job.entry in holds:
            return Wait(job.entry, WaitReason.HELD,
                        f"{verdict}; holding node(s) {', '.join(sorted(holds[job.entry]))}")
        return Wait(job.entry, verdict.reason, verdict.detail)
    placements = config.fair.weighted(verdict)
    if quota is not None and (config.fair.model_weights or tiered):
        weighted = sum(p.gpu_equivalents for p in placements)
        refusal = _quota_refusal(job, weighted, usage, config)
        if refusal:  # the model it landed on weighs more than one GPU
            return Wait(job.entry, WaitReason.QUOTA, f"{refusal} here")
    return Proposal(job.entry, job.team, placements)


def _quota_refusal(job: JobRequest, need: float, usage: Mapping[Team, float], config: CycleConfig) -> str | None:
    return quota_refusal(job.team, need, usage, config.fair, preemptible=job.preemptible,
                         borrow_requires=config.borrow_requires)


def _ceiling(job: JobRequest, usage: Mapping[Team, float], config: CycleConfig) -> float:
    """The most the team may hold with this job: its quota, or up to its borrowing limit when the cohort would
    lend that much now."""
    policy = config.fair.team(job.team)
    quota = policy.quota_gpu or 0.0
    if policy.borrow_gpu <= 0 or _quota_refusal(job, quota + policy.borrow_gpu - usage.get(job.team, 0.0),
                                                usage, config):
        return quota
    return quota + policy.borrow_gpu


def commit(ledger: Ledger, state: CycleState, decided: Proposal | Wait) -> Decision:
    """Reserve an admission at once, so that the next job sees it; its hold, if any, is done."""
    if isinstance(decided, Wait):
        return decided
    ledger.reserve(decided.entry, decided.team, decided.placements)
    state.holds.pop(decided.entry, None)
    return Admit(decided.entry, decided.team, decided.placements)


def _fitter(snap: Snapshot, ledger: Ledger, config: CycleConfig, holds: Mapping[EntryId, frozenset[NodeId]],
            entry: EntryId, slack: float | None) -> Fitter:
    blocked = frozenset(n for e, nodes in holds.items() if e != entry for n in nodes)
    return Fitter(ledger.index, FitContext(snap.policy, snap.demand, blocked, config.per_class_limit, memo=snap.memo,
                                           slack=slack))


def _chain(first: Iterable[JobRequest], rest: Iterable[JobRequest]) -> Iterable[JobRequest]:
    yield from first
    yield from rest


def _starving(queue: Sequence[JobRequest], now: float, config: CycleConfig) -> list[JobRequest]:
    """The jobs of the top priority that have waited past the threshold, oldest first."""
    if not queue or config.max_holds <= 0:
        return []
    top = max(j.priority for j in queue)
    old = sorted((j for j in queue if j.priority == top and now - j.submitted_at >= config.hol_threshold_s),
                 key=lambda j: (j.submitted_at, j.entry))
    return old


def _live_holds(
    ledger: Ledger, holds: Mapping[EntryId, frozenset[NodeId]], queued: Mapping[EntryId, JobRequest]
) -> dict[EntryId, frozenset[NodeId]]:
    """Drop holds whose job left the queue or whose nodes stopped being schedulable."""
    out: dict[EntryId, frozenset[NodeId]] = {}
    for entry, nodes in sorted(holds.items()):
        if entry not in queued:
            continue
        if all((nf := ledger.index.get(n)) is not None and nf.offered for n in nodes):
            out[entry] = nodes
    return out


def _choose_hold(ledger: Ledger, job: JobRequest, taken: frozenset[NodeId]) -> frozenset[NodeId]:
    """Nodes that could host the job when empty, fewest allocations to wait for first (an O(nodes)
    scan, done once per starving job, not per decision). A one-node gang holds one node for all."""
    groups = [job.asks] if job.one_node else [(a,) for a in job.asks]
    chosen: set[NodeId] = set()
    for asks in groups:
        best: tuple[int, int, int, NodeId] | None = None
        for nf in ledger.index.nodes():
            node = nf.node
            if nf.id in taken or nf.id in chosen or not nf.offered:
                continue
            if not job.places_on(node):
                continue
            if not _hosts_when_empty(node, asks):
                continue
            # fewest allocations to wait for first (the bound on the holder's wait), then most free now
            closeness = sum(len(o.instance_ids) for o in options(nf, asks[0]))
            key = (len(ledger.entries_on(nf.id)), -closeness, ledger.index.rank(nf.id), nf.id)
            if best is None or key < best:
                best = key
        if best is None:
            return frozenset()
        chosen.add(best[-1])
    return frozenset(chosen)


def _hosts_when_empty(node: Node, asks: Sequence[AllocAsk]) -> bool:
    """Whether the empty node takes every ask, each as its first alternative that fits there."""
    stage = NodeFree.of(node, ())
    for ask in asks:
        if stage.cpu_free < ask.cpu_mhz or stage.mem_free < ask.memory_mb:
            return False
        opt = next((o for alt in ask.alternatives() for o in options(stage, alt)), None)
        if opt is None:
            return False
        stage = stage.take(AllocPlacement(ask.group, ask.index, node.id, ask.cpu_mhz, ask.memory_mb,
                                          opt.instance_ids, opt.device_name, opt.share_milli,
                                          share_gpu=opt.share_gpu))
    return True
