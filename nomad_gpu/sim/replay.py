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
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nomad_gpu.domain.cycle import Admit, CycleConfig, run_cycle
from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Inventory
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.requests import AllocAsk, JobRequest
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
               label_of: Callable[[TracePod], str] | None = None) -> ReplayResult:
    """Replay `trace` on its sampled nodes, or on `inventory` (another fleet; the sample is then the
    caller's), each task asking `ask_of(pod)` (its trace ask by default); `label_of` sorts the waits."""
    if inventory is None:
        inventory = sample_nodes(trace, config.node_fraction, config.seed)
    gpus = sum(len(n.gpus) for n in inventory)
    ledger = Ledger(inventory)
    cycle = CycleConfig(policy=policy)
    ran = [p for p in trace.pods if p.runtime_s is not None]
    arrivals = deque(sorted(((p.creation_time / config.speedup, i, p) for i, p in enumerate(ran)),
                            key=lambda a: (a[0], a[1])))
    result = ReplayResult(policy, config, gpus, left_out=len(trace.pods) - len(ran))
    queue: dict[EntryId, tuple[float, JobRequest, TracePod]] = {}
    running: list[tuple[float, EntryId, int]] = []
    recent: deque[JobRequest] = deque(maxlen=config.demand_window)
    demand = Demand(())
    since_refresh = 0
    holds: dict[EntryId, frozenset[NodeId]] = {}
    ever_held: set[EntryId] = set()
    used = 0
    start = arrivals[0][0] if arrivals else 0.0
    end = start
    result.arrivals_s = (arrivals[-1][0] - start) if arrivals else 0.0
    while arrivals or running:
        now = min(arrivals[0][0] if arrivals else float("inf"), running[0][0] if running else float("inf"))
        while running and running[0][0] <= now:
            done, entry, milli = heapq.heappop(running)
            ledger.release(entry)
            used -= milli
            end = max(end, done)
        while arrivals and arrivals[0][0] <= now:
            at, i, pod = arrivals.popleft()
            job = JobRequest(EntryId(f"t{i}"), TEAM, (ask_of(pod) if ask_of else pod.to_ask(),), submitted_at=at)
            queue[job.entry] = (at, job, pod)
            recent.append(job)
            since_refresh += 1
        if since_refresh >= config.demand_refresh or not demand.shapes:
            demand = Demand.from_jobs(recent)  # the cycle weighs its large shapes by the nodes as they stand
            since_refresh = 0
        if queue:
            got = run_cycle(ledger, [q[1] for q in queue.values()], now=now, config=cycle, holds=holds,
                            demand=demand)
            holds = dict(got.holds)
            ever_held.update(holds)
            for decision in got.decisions:
                if isinstance(decision, Admit):
                    at, job, pod = queue.pop(decision.entry)
                    runtime = pod.runtime_s or 0.0
                    heapq.heappush(running, (now + runtime, decision.entry, pod.gpu_milli_total))
                    used += pod.gpu_milli_total
                    result.waits.append(now - at)
                    if label_of is not None:
                        result.waits_by.setdefault(label_of(pod), []).append(now - at)
                    if pod.num_gpu > 1:
                        result.multi_gpu_waits.append(now - at)
                        result.multi_gpu_held += decision.entry in ever_held
                    result.last_start_s = now - start
        result.times.append(now - start)
        result.gpu_util_pct.append(round(100.0 * used / max(1, gpus * MILLI_PER_GPU), 3))
        result.queue_len.append(len(queue))
        if not running and not arrivals:
            break
    result.never_started = len(queue)
    if label_of is not None:
        result.never_by.update(label_of(pod) for _, _, pod in queue.values())
    result.makespan_s = end - start
    return result
