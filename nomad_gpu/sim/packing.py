"""The FGD paper's arrival-only packing experiment, driven through the service's own fitter and ledger.

Each task of a seed's workload (`workload.build_workload`) is placed once, in order, by
`fit.Fitter` in exact mode (every feasible node scored, ties to the seed's node priority) and
committed with `Ledger.reserve`, or counted as failed: no queue, no departures, no retries. After
every event the cluster's GPU allocation is recorded against the GPU requested so far ("arrived",
failed tasks included), and the curve is sampled at integer percents as the paper's analysis
script does (`sample_percent`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.fragmentation import Demand, RoomLeft
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, NoFit
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.domain.scoring import ScoreMemo
from nomad_gpu.sim.trace import Trace, TracePod
from nomad_gpu.sim.workload import build_workload, typical_demand

ARRIVED_MAX_PCT = 130
TEAM = Team("trace")


@dataclass(frozen=True)
class SeedRun:
    """One seed's events: arrived and allocated milli-GPU after each task (there is no event for
    the empty start: the paper's first report runs before its nodes exist and logs nothing)."""

    policy: str
    seed: int
    capacity_milli: int
    arrived: tuple[int, ...]
    used: tuple[int, ...]
    placed: int
    failed: int

    @property
    def gpus(self) -> int:
        return self.capacity_milli // MILLI_PER_GPU

    def sampled(self, upto: int = ARRIVED_MAX_PCT) -> list[float | None]:
        return sample_percent(self.arrived, self.used, self.gpus, upto)


def run_seed(trace: Trace, policy: str, seed: int, *, tune: float = 1.3, demand: Demand | None = None) -> SeedRun:
    """Place one seed's workload with `policy`; `demand` defaults to the trace's typical tasks."""
    return place_seed(trace, policy, seed, tune=tune, demand=demand)[0]


@dataclass(frozen=True)
class Decision:
    """One task's turn, as `place_seed` shows it to an observer before committing it: the cluster
    (`ledger`) and the demand in force are as the policy saw them."""

    pod: TracePod
    placed: tuple[AllocPlacement, ...] | None
    """None: the task failed."""
    ledger: Ledger
    demand: Demand | None
    """The fitter's, re-weighed as the room for large shapes moves (never None in this experiment)."""
    arrived_milli: int
    """GPU asked so far, this task included."""


Observer = Callable[[Decision], None]


def place_seed(trace: Trace, policy: str, seed: int, *, tune: float = 1.3,
               demand: Demand | None = None,
               observe: Observer | None = None) -> tuple[SeedRun, Ledger, list[TracePod]]:
    """`run_seed`, also returning the cluster as it ends and the tasks that failed (for analyses
    of what is left unallocated, `benchmarks/packing_leftover.py`); `observe` sees every decision
    before it is committed (for analyses of where two policies part, `benchmarks/packing_why.py`)."""
    workload = build_workload(trace, seed, tune)
    demand = demand if demand is not None else typical_demand(trace)
    ledger = Ledger(trace.inventory)
    chosen = get_policy(policy, seed=seed)
    fitter = Fitter(ledger.index, FitContext(chosen, demand, per_class_limit=None, rank=workload.rank,
                                              memo=ScoreMemo()))
    room = RoomLeft(demand, ledger.index) if chosen.uses_large_shapes and demand.large else None
    asks = {pod.name: pod.to_ask() for pod in trace.pods}
    arrived: list[int] = []
    used: list[int] = []
    failed: list[TracePod] = []
    total_arrived = total_used = 0
    for i, pod in enumerate(workload.tasks):
        job = JobRequest(EntryId(f"t{i}"), TEAM, (asks[pod.name],))
        total_arrived += pod.gpu_milli_total
        got = fitter.fit_job(job)
        if observe is not None:
            observe(Decision(pod, None if isinstance(got, NoFit) else got, ledger, fitter.ctx.demand, total_arrived))
        if isinstance(got, NoFit):
            failed.append(pod)
        else:
            before = [ledger.index.get(p.node) for p in got]
            ledger.reserve(job.entry, TEAM, got)
            total_used += pod.gpu_milli_total
            if room is not None and (weighed := room.moved(before)) is not None:
                # the weights moved: the memoised scores were for the old ones
                fitter = Fitter(ledger.index, FitContext(chosen, weighed, per_class_limit=None, rank=workload.rank,
                                                          memo=ScoreMemo()))
        arrived.append(total_arrived)
        used.append(total_used)
    run = SeedRun(policy, seed, trace.gpu_milli_capacity, tuple(arrived), tuple(used),
                  len(workload.tasks) - len(failed), len(failed))
    return run, ledger, failed


def sample_percent(arrived: Sequence[int], used: Sequence[int], gpus: int,
                   upto: int = ARRIVED_MAX_PCT) -> list[float | None]:
    """Allocation % at each integer arrived % 0..upto, as the paper's `merge_alloc_discrete.py`:
    every event's arrived % is rounded to an integer (half to even) and its allocation % to two
    decimals; the value at x is the mean over events at x (or, if none, at x-1..x+1), rounded.
    Those roundings are Python's and numpy's respectively; both matter at the last digit."""
    arrive = np.array([round(a / gpus / 10) for a in arrived], dtype=np.int64)
    alloc = np.array([round(u / gpus / 10, 2) for u in used], dtype=np.float64)
    out: list[float | None] = []
    for x in range(upto + 1):
        sel = alloc[arrive == x]
        if sel.size == 0:
            sel = alloc[(arrive >= x - 1) & (arrive <= x + 1)]
        # the script rounds pandas' mean, a numpy float: numpy rounds x * 100 half to even
        out.append(float(np.round(sel.sum() / sel.size, 2)) if sel.size else None)
    return out


def _run_one(args: tuple[Trace, str, int, float]) -> SeedRun:
    trace, policy, seed, tune = args
    return run_seed(trace, policy, seed, tune=tune)


def run_seeds(trace: Trace, policy: str, seeds: Sequence[int], *, tune: float = 1.3,
              workers: int | None = None) -> list[SeedRun]:
    """Every seed, in parallel processes when `workers` > 1 (default: one per CPU, at most one per seed)."""
    workers = min(len(seeds), workers or os.cpu_count() or 1)
    jobs = [(trace, policy, s, tune) for s in seeds]
    if workers <= 1:
        return [_run_one(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_run_one, jobs))
