"""A queueing replay of a trace through the service's own scheduling cycle: what fragmentation costs
in waiting.

Tasks arrive at `creation_time / speedup`, wait in the queue, are admitted by `cycle.run_cycle`
(the live service's cycle: priority and fair-share order, head-of-line holds, the bounded fitter)
and hold their placement for their run time in the trace (`deletion_time - scheduled_time`; tasks
that never ran in the trace have none and are left out). A cycle runs after every batch of
simultaneous events, as the service runs one after every arrival or completion. The typical
demand the fragmentation-aware policies expect is the recent arrivals (a sliding window), the
simulator's stand-in for the queue's recent history.

The openb trace barely loads its own cluster in real time (about 1 % of the GPUs at its peak), so
`speedup` (compressed arrivals) and `node_fraction` (a seeded sample of the nodes) exist to put the
same work under pressure.

With a `PreemptPolicy` (preempt.py), a task that may preempt and still waits after a cycle is offered
the minimal victim set on one node: the victims' devices go to it at once in the books, it starts
after their grace, and they are requeued then with their age kept (their wait is the sum of their
times in the queue). Without one, nothing is taken back.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nomad_gpu.domain.cycle import CycleConfig, run_cycle
from nomad_gpu.domain.fit import FitContext
from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Inventory
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.requests import AllocAsk, JobRequest
from nomad_gpu.sim.preempt import (
    SERVING,
    Attempt,
    Candidates,
    NoVictims,
    Preemption,
    PreemptPolicy,
    PreemptStats,
    ask_key,
    candidates,
    choose,
    isolated_victim_available,
)
from nomad_gpu.sim.trace import Trace, TraceNode, TracePod

TEAM = Team("trace")


@dataclass(frozen=True)
class ReplayConfig:
    speedup: float = 1.0
    node_fraction: float = 1.0
    seed: int = 42
    demand_window: int = 2000
    """Recent arrivals the typical demand is built from."""
    demand_refresh: int = 250
    """Rebuild the demand after this many arrivals (a rebuild drops its fragmentation memo)."""

    def __post_init__(self) -> None:
        if not self.speedup > 0:
            raise ValueError(f"speedup must be > 0, got {self.speedup}")
        if not 0 < self.node_fraction <= 1:
            raise ValueError(f"node fraction must be within (0, 1], got {self.node_fraction}")


@dataclass
class ReplayResult:
    policy: str
    config: ReplayConfig
    gpus: int
    times: list[float] = field(default_factory=list)
    gpu_util_pct: list[float] = field(default_factory=list)
    queue_len: list[int] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    multi_gpu_waits: list[float] = field(default_factory=list)
    """The waits of tasks asking for more than one GPU (also in `waits`): the tasks that room kept
    for large shapes, or its absence, serves or starves."""
    multi_gpu_held: int = 0
    """How many of those had nodes held for them (head-of-line protection) before they started."""
    never_started: int = 0
    left_out: int = 0
    waits_by: dict[str, list[float]] = field(default_factory=dict)
    """The waits per label of the started tasks (`run_replay`'s `label_of`; empty without one)."""
    never_by: Counter[str] = field(default_factory=Counter)
    """The tasks still queued at the end, per label."""
    makespan_s: float = 0.0
    arrivals_s: float = 0.0
    """From the first arrival to the last."""
    last_start_s: float = 0.0
    preempt: PreemptStats | None = None
    """What preemption took and cost (with a `PreemptPolicy` only)."""

    @property
    def started(self) -> int:
        return len(self.waits)

    @property
    def mean_util_pct(self) -> float:
        """Time-weighted mean GPU allocation over the makespan."""
        return self.mean_util_until(float("inf"))

    @property
    def mean_util_arrivals_pct(self) -> float:
        """Time-weighted mean GPU allocation while tasks arrive (long tasks stretch the makespan)."""
        return self.mean_util_until(self.arrivals_s)

    def mean_util_until(self, until: float) -> float:
        t = np.minimum(np.array(self.times), until)
        if len(t) < 2 or t[-1] <= t[0]:
            return 0.0
        u = np.array(self.gpu_util_pct[:-1])
        return round(float((u * np.diff(t)).sum() / (t[-1] - t[0])), 2)

    def wait_pct(self, q: float) -> float:
        return round(float(np.percentile(self.waits, q)), 1) if self.waits else 0.0

    def to_json(self) -> dict[str, Any]:
        step = max(1, len(self.times) // 2000)
        waits = {"mean": round(float(np.mean(self.waits)), 1) if self.waits else 0.0,
                 "p50": self.wait_pct(50), "p95": self.wait_pct(95), "p99": self.wait_pct(99)}
        return {
            "policy": self.policy, "speedup": self.config.speedup, "node_fraction": self.config.node_fraction,
            "seed": self.config.seed, "gpus": self.gpus, "tasks_started": self.started,
            "tasks_never_started": self.never_started, "tasks_left_out": self.left_out,
            "gpu_util_mean_pct": self.mean_util_pct, "gpu_util_mean_while_arriving_pct": self.mean_util_arrivals_pct,
            "arrivals_span_s": round(self.arrivals_s, 1), "last_start_s": round(self.last_start_s, 1),
            "wait_s": waits, "wait_multi_gpu_s": {**_summary(self.multi_gpu_waits), "held": self.multi_gpu_held},
            "makespan_s": round(self.makespan_s, 1),
            "series": {"time_s": self.times[::step], "gpu_util_pct": self.gpu_util_pct[::step],
                       "queue_len": self.queue_len[::step]},
        }


def _summary(waits: list[float]) -> dict[str, float]:
    if not waits:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0}
    return {"count": len(waits), "mean": round(float(np.mean(waits)), 1),
            "p50": round(float(np.percentile(waits, 50)), 1), "p95": round(float(np.percentile(waits, 95)), 1)}


def sample_trace_nodes(trace: Trace, fraction: float, seed: int) -> tuple[TraceNode, ...]:
    """The seeded sample of the nodes a replay runs on (all of them, in file order, at 1)."""
    if fraction >= 1:
        return trace.nodes
    nodes = sorted(trace.nodes, key=lambda n: n.name)
    return tuple(random.Random(seed).sample(nodes, max(1, round(len(nodes) * fraction))))


def sample_nodes(trace: Trace, fraction: float, seed: int) -> Inventory:
    if fraction >= 1:
        return trace.inventory
    return Inventory.of(n.to_node() for n in sample_trace_nodes(trace, fraction, seed))


def run_replay(trace: Trace, policy: str, config: ReplayConfig = ReplayConfig(), *,
               inventory: Inventory | None = None, ask_of: Callable[[TracePod], AllocAsk] | None = None,
               label_of: Callable[[TracePod], str] | None = None,
               preemption: PreemptPolicy | None = None) -> ReplayResult:
    """Replay `trace` on its sampled nodes, or on `inventory` (another fleet; the sample is then the
    caller's), each task asking `ask_of(pod)` (its trace ask by default); `label_of` sorts the waits
    (and gives each task its class for `preemption`)."""
    if inventory is None:
        inventory = sample_nodes(trace, config.node_fraction, config.seed)
    ran = [p for p in trace.pods if p.runtime_s is not None]
    arrivals = deque(sorted(((p.creation_time / config.speedup, i, p) for i, p in enumerate(ran)),
                            key=lambda a: (a[0], a[1])))
    gpus = sum(len(n.gpus) for n in inventory)
    state = _Replay(Ledger(inventory), policy, label_of, preemption,
                    ReplayResult(policy, config, gpus, left_out=len(trace.pods) - len(ran)))
    result = state.result
    recent: deque[JobRequest] = deque(maxlen=config.demand_window)
    demand = Demand(())
    since_refresh = 0
    start = arrivals[0][0] if arrivals else 0.0
    state.start = state.end = start
    result.arrivals_s = (arrivals[-1][0] - start) if arrivals else 0.0
    while arrivals or state.running or state.stopping:
        now = min(arrivals[0][0] if arrivals else float("inf"), state.next_event())
        moved = state.advance(now)
        while arrivals and arrivals[0][0] <= now:
            at, i, pod = arrivals.popleft()
            job = JobRequest(EntryId(f"t{i}"), TEAM, (ask_of(pod) if ask_of else pod.to_ask(),), submitted_at=at)
            state.arrived(at, job, pod)
            recent.append(job)
            since_refresh += 1
            moved = True
        if since_refresh >= config.demand_refresh or not demand.shapes:
            demand = Demand.from_jobs(recent)  # the cycle weighs its large shapes by the nodes as they stand
            since_refresh = 0
        if state.queue:
            state.cycle(now, demand, full=moved)  # not `moved`: only a preemption timer fired
        if state.wake <= now:
            state.wake = float("inf")  # reached: an offer ran and set the next, or nothing waits
        result.times.append(now - start)
        result.gpu_util_pct.append(round(100.0 * state.used / max(1, result.gpus * MILLI_PER_GPU), 3))
        result.queue_len.append(len(state.queue))
        if not state.running and not arrivals and not state.stopping:
            break
    result.never_started = len(state.queue)
    if label_of is not None:
        result.never_by.update(label_of(pod) for _, _, pod in state.queue.values())
    result.makespan_s = state.end - start
    return result


class _Replay:
    """The replay's books between events: the queue, what runs, what stops for a preemptor."""

    def __init__(self, ledger: Ledger, policy: str, label_of: Callable[[TracePod], str] | None,
                 preemption: PreemptPolicy | None, result: ReplayResult) -> None:
        self.ledger, self.label_of, self.preemption, self.result = ledger, label_of, preemption, result
        self.cycle_config = CycleConfig(policy=policy)
        self.queue: dict[EntryId, tuple[float, JobRequest, TracePod]] = {}
        self.jobs: dict[EntryId, tuple[float, JobRequest, TracePod]] = {}
        """Every task that arrived (a victim goes back to the queue as it came)."""
        self.running: list[tuple[float, EntryId, int, int]] = []
        """(end, entry, milli, attempt): an attempt's end counts only while it is the entry's current one."""
        self.attempt: dict[EntryId, int] = {}
        self.attempts: dict[EntryId, Attempt] = {}
        self.stopping: list[tuple[float, int, Preemption]] = []
        """(grace end, sequence, preemption): victims stopping, their devices held for the preemptor."""
        self.requeued: dict[EntryId, float] = {}
        """Victims back in the queue, since when."""
        self.wait_at: dict[EntryId, tuple[str, int]] = {}
        self.holds: dict[EntryId, frozenset[NodeId]] = {}
        self.no_victims: NoVictims = {}
        self.wake = float("inf")
        """The next time an offer of preemption could find something new (`PreemptPolicy.next_offer`)."""
        self.dirty = False
        """Whether the books or the holds moved since the last offer."""
        self.ever_held: set[EntryId] = set()
        self.used = 0
        self.start = self.end = 0.0
        if preemption is not None:
            result.preempt = PreemptStats()

    def next_event(self) -> float:
        ends = [self.running[0][0]] if self.running else []
        ends += [self.stopping[0][0]] if self.stopping else []
        return min([*ends, self.wake])

    def arrived(self, at: float, job: JobRequest, pod: TracePod) -> None:
        self.queue[job.entry] = self.jobs[job.entry] = (at, job, pod)
        policy = self.preemption
        if policy is not None and self.label_of is not None and policy.may_preempt(self.label_of(pod)):
            self.wake = min(self.wake, at + policy.preempt_after_s)

    def advance(self, now: float) -> bool:
        """Attempts that ended by `now` release their devices; graces that ended start their preemptor.
        Whether anything did."""
        moved = False
        while self.running and self.running[0][0] <= now:
            done, entry, milli, attempt = heapq.heappop(self.running)
            if self.attempt.get(entry) != attempt:
                continue  # preempted meanwhile
            moved = True
            self.ledger.release(entry)
            self.used -= milli
            self.end = max(self.end, done)
            ended = self.attempts.pop(entry, None)
            stats = self.result.preempt
            if stats is not None and ended is not None:
                stats.delivered_gpu_s += ended.gpu_equivalents * (done - ended.started_at)
                stats.completed.add(entry)
                stats.released(ended.label, ended.placements)
        while self.stopping and self.stopping[0][0] <= now:
            _, _, taken = heapq.heappop(self.stopping)
            self._grace_ended(taken, now)
            moved = True
        self.dirty = self.dirty or moved
        return moved

    def cycle(self, now: float, demand: Demand, *, full: bool = True) -> None:
        """The service's cycle after an arrival or a release; then, with a policy, an offer of preemption
        when the books, the holds or a window (the preemption timer, `full` False) moved since the last."""
        if full:
            got = run_cycle(self.ledger, [q[1] for q in self.queue.values()], now=now, config=self.cycle_config,
                            holds=self.holds, demand=demand)
            self.dirty = self.dirty or dict(got.holds) != self.holds or bool(got.admitted)
            self.holds = dict(got.holds)
            self.ever_held.update(self.holds)
            for decision in got.admitted:
                self._started(decision.entry, decision.placements, now)
                if self.result.preempt is not None:
                    self.result.preempt.placed(self.attempts[decision.entry].label, decision.placements)
        if self.preemption is not None and (self.dirty or self.wake <= now):
            self.dirty = False
            self._offer_preemption(now, demand)

    def _started(self, entry: EntryId, placements: tuple[AllocPlacement, ...], now: float) -> None:
        self.queue.pop(entry)
        self._begin(entry, placements, now)

    def _begin(self, entry: EntryId, placements: tuple[AllocPlacement, ...], now: float) -> None:
        """An attempt starts on placements the ledger already holds for it."""
        at, _, pod = self.jobs[entry]
        attempt = self.attempt.get(entry, -1) + 1
        self.attempt[entry] = attempt
        heapq.heappush(self.running, (now + (pod.runtime_s or 0.0), entry, pod.gpu_milli_total, attempt))
        self.used += pod.gpu_milli_total
        result = self.result
        label = self.label_of(pod) if self.label_of is not None else ""
        if result.preempt is not None:
            self.attempts[entry] = Attempt(entry, label, now, placements, result.preempt.preemptions[entry])
        if entry in self.requeued:  # a victim again: its time back in the queue adds to its one wait
            waited = now - self.requeued.pop(entry)
            label, pos = self.wait_at[entry]
            result.waits_by[label][pos] += waited
            return
        result.waits.append(now - at)
        if self.label_of is not None:
            result.waits_by.setdefault(label, []).append(now - at)
            self.wait_at[entry] = (label, len(result.waits_by[label]) - 1)
        if pod.num_gpu > 1:
            result.multi_gpu_waits.append(now - at)
            result.multi_gpu_held += entry in self.ever_held
        result.last_start_s = now - self.start

    def _offer_preemption(self, now: float, demand: Demand) -> None:
        """Each waiting task that may preempt and has waited long enough, oldest first: its minimal
        victims, if any (preempt.py). A shape that found none is not tried again in this pass."""
        policy, stats, label_of = self.preemption, self.result.preempt, self.label_of
        assert policy is not None and stats is not None and label_of is not None
        preemptors = [q for q in self.queue.values() if policy.may_preempt(label_of(q[2]))]
        # a timer of its own, as the service's: nothing else may happen before it
        self.wake = policy.next_offer(now, (q[0] for q in preemptors), self.attempts.values())
        waiting = sorted((q for q in preemptors if policy.waited_enough(q[0], now)), key=lambda q: (q[0], q[1].entry))
        if not waiting:
            return
        fit_policy = get_policy(self.cycle_config.policy)
        failed: set[object] = set()
        by_label: dict[str, Candidates] = {}
        isolated: bool | None = None
        for _, job, pod in waiting:
            label = label_of(pod)
            if label == SERVING and job.entry not in stats.serving_isolated_victim:
                stats.serving_waited.add(job.entry)
                if isolated is None:
                    isolated = isolated_victim_available(self.attempts.values(), label, policy, now)
                if isolated:
                    stats.serving_isolated_victim.add(job.entry)
            if ask_key(job) in failed:
                continue
            if label not in by_label:
                by_label[label] = candidates(self.attempts.values(), label, policy, now)
            blocked = frozenset(n for e, ns in self.holds.items() if e != job.entry for n in ns)
            taken = choose(self.ledger, job, by_label[label], FitContext(fit_policy, demand, blocked), self.no_victims)
            if taken is None:
                failed.add(ask_key(job))
                continue
            self._take_back(taken, label, now)
            self.wake = min(self.wake, now + policy.grace_s)
            by_label.clear()  # the victims are no longer candidates
            isolated = None

    def _take_back(self, taken: Preemption, label: str, now: float) -> None:
        """The victims stop (their grace runs) and their devices go to the preemptor in the books at
        once, so nothing else takes them; it leaves the queue and starts when the grace ends."""
        policy, stats = self.preemption, self.result.preempt
        assert policy is not None and stats is not None
        for victim in taken.victims:
            attempt = self.attempts.pop(victim)
            self.ledger.release(victim)
            self.attempt[victim] += 1  # its scheduled end no longer counts
            stats.preemptions[victim] += 1
            stats.lost_gpu_s += attempt.gpu_equivalents * (now + policy.grace_s - attempt.started_at)
            stats.released(attempt.label, attempt.placements)
        self.ledger.reserve(taken.preemptor, TEAM, taken.placements)
        stats.placed(label, taken.placements)
        self.queue.pop(taken.preemptor)
        self.holds.pop(taken.preemptor, None)
        stats.preemptors += 1
        heapq.heappush(self.stopping, (now + policy.grace_s, stats.preemptors, taken))

    def _grace_ended(self, taken: Preemption, now: float) -> None:
        """The victims are gone: back in the queue with their age kept; the preemptor starts."""
        for victim in taken.victims:
            self.used -= self.jobs[victim][2].gpu_milli_total
            self.queue[victim] = self.jobs[victim]
            self.requeued[victim] = now
        self._begin(taken.preemptor, taken.placements, now)
