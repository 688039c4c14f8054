"""Workload classes on the openb trace: the whole-GPU habit, FGD's time-sharing and classes, side by side.

The FGD paper's arrival-only packing experiment (each task placed once, in the seed's order, by the
service's own fitter and ledger, `frag-aware` policy, exact mode; no departures), on the openb node list
with every GPU an H100 80GB, three ways on the same seeds (paired workloads and node priorities):

- (a) `whole`: every GPU task asks whole GPUs (a fractional task takes one whole GPU), on whole GPUs;
- (b) `share`: every fractional task time-shares a GPU, as in the paper, on GPUs that take both shares
  and whole-GPU tasks; a `serving` task on a GPU with another tenant is an isolation violation;
- (c) `classes`: fractional `LS` tasks (and `Guaranteed`/`Burstable`) are `serving`, fractional `BE`
  tasks `exploratory`, whole and multi-GPU tasks `training`; `gpu_memory` of a fractional task is its
  fraction of 80 GiB; each asks the tiers of the default class policy (nomad_gpu/domain/classes.py) over
  a fleet whose GPUs an operator split into MIG-mode GPUs (the balanced static layout 3g.40gb +
  2g.20gb + 1g.10gb + 1g.10gb, with the memory NVML reports), shared GPUs and whole GPUs. One row per
  split (`--splits mig:shared:whole`, parts of each node's GPUs; `.../node`: whole nodes per mode;
  `...+relayout`: MIG layouts that follow the queue through the service's planner; benchmarks/classfleet.py).

Allocation % is the paper's allocation ratio: the GPU requests of the placed tasks (a fractional task
counts its fraction, whatever it was given) over the fleet's GPUs, at the end of the run (the workload is
sized to 130 % of the fleet's GPUs arrived, as in the paper). GPU-eq held % is what the fleet handed out
over its GPU-equivalents (a whole GPU 1, a MIG instance its compute slices / 7, a share its milli / 1000):
a fractional task given a whole GPU holds 1. Usage:

    .venv/bin/python benchmarks/classes.py [--seeds 42-51] [--splits 2:2:4,1:1:6/node+relayout] [--workers 2]
        [--json c.json]

With `--replay`, each scenario instead runs the queueing replay (nomad_gpu/sim/replay.py: arrivals
at `creation_time / speedup`, departures after the trace's run time, the service's own cycle with the
`frag-aware` policy) on the same fleet and class mapping, over each seed's sample of the nodes
(`--node-fraction`), and reports the waits p50/p95 per class; tasks still queued at the end are counted
apart, not in the waits:

    .venv/bin/python benchmarks/classes.py --replay [--speedup 2000] [--node-fraction 0.2] [--seeds 42-51]

A `+preempt` row (replay only) takes GPUs back under the default preemption policy, each task giving a
60 s checkpoint grace (nomad_gpu/sim/preempt.py), and reports allocation, the work lost, preemptions
per victim, isolation violations and how many serving waits had an isolated preemptible victim at all.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from classfleet import MigRelayer, Split, SplitSpec, fleet

from nomad_gpu.domain.classes import (
    DEFAULT_CLASS_POLICY,
    DEFAULT_RULES,
    GIB,
    ClassPolicy,
    ClassRule,
    OptionFact,
    Size,
    WorkloadClass,
    fleet_facts,
    tiers_for,
)
from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.fragmentation import Demand, Shape
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, InstanceId, Team
from nomad_gpu.domain.inventory import Inventory
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import NoFit
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, WholeGpus
from nomad_gpu.domain.scoring import ScoreMemo
from nomad_gpu.sim.preempt import PreemptPolicy, PreemptStats
from nomad_gpu.sim.replay import ReplayConfig, run_replay, sample_trace_nodes
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, Trace, TracePod, load_trace
from nomad_gpu.sim.workload import build_workload

J = TypeVar("J")
R = TypeVar("R")
SERVING_QOS = frozenset({"LS", "Guaranteed", "Burstable"})
POLICY = "frag-aware"
TEAM = Team("trace")
CHECKPOINT_GRACE_S = 60.0
"""The `checkpoint` grace each trace task gives in the `+preempt` rows."""


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def qos_of(pods_csv: Path) -> dict[str, str]:
    with pods_csv.open(newline="") as f:
        return {row["name"]: row.get("qos") or "" for row in csv.DictReader(f)}


def class_of(pod: TracePod, qos: str) -> WorkloadClass | None:
    if pod.num_gpu == 0 or pod.gpu_milli == 0:
        return None
    if pod.num_gpu == 1 and pod.gpu_milli < MILLI_PER_GPU:
        return WorkloadClass.SERVING if qos in SERVING_QOS else WorkloadClass.EXPLORATORY
    return WorkloadClass.TRAINING


# ---- asks ------------------------------------------------------------------------------------------
TRAINING_SHARED = ClassPolicy({**DEFAULT_RULES, WorkloadClass.TRAINING: ClassRule((("gpu",), ("share",)))})
"""An operator's policy that lets one-GPU training take an idle shared GPU whole (tier 2)."""


def ask_of(pod: TracePod, cls: WorkloadClass | None, scenario: str, facts: tuple[OptionFact, ...],
           training_shared: bool = False) -> AllocAsk:
    """The pod's ask in a scenario (GPU models dropped: every GPU is an H100)."""
    base = AllocAsk("task", 0, pod.cpu_milli, pod.memory_mib)
    if cls is None:
        return base
    if cls is WorkloadClass.TRAINING:
        if training_shared and pod.num_gpu == 1 and scenario == "classes":  # `class: training`, no `gpu:`
            tiers = tuple(t.alternatives for t in tiers_for(cls, Size(), TRAINING_SHARED, facts) if t.alternatives)
            return replace(base, tiers=tiers)
        return replace(base, gpu=WholeGpus(pod.num_gpu))
    if scenario == "whole":
        return replace(base, gpu=WholeGpus(1))
    if scenario == "share":
        return replace(base, gpu=GpuShare(pod.gpu_milli))
    need = -(-pod.gpu_milli * 80 * GIB // MILLI_PER_GPU)
    tiers = tuple(t.alternatives for t in tiers_for(cls, Size(need), DEFAULT_CLASS_POLICY, facts) if t.alternatives)
    return AllocAsk("task", 0, pod.cpu_milli, pod.memory_mib, tiers=tiers)


def demand_of(asks: list[AllocAsk], inventory: Inventory, coverage: float = 0.95) -> Demand:
    """The typical asks of the original tasks, as the packing experiment builds them, over this fleet."""
    counts: Counter[Shape] = Counter()
    for ask in asks:
        shape = Shape.of(ask)
        if shape is not None:
            counts[shape] += 1
    return Demand.from_shapes(counts, coverage).scarce_on(NodeFree.of(n, ()) for n in inventory)


# ---- one run ---------------------------------------------------------------------------------------
@dataclass
class Run:
    scenario: str
    seed: int
    gpus: int
    arrived_gpu: float = 0.0
    placed_gpu: float = 0.0
    """What the placed tasks asked in the trace's own terms (a fraction of a GPU is that fraction)."""
    allocated_eq: float = 0.0
    """What the fleet handed them (a fractional task on a whole GPU holds 1, on a 2g.20gb 2/7)."""
    placed: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    violations: int = 0
    serving_placed: int = 0
    relayouts: int = 0
    """MIG re-layouts made (the re-layout rows only)."""
    by_kind: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def allocation_pct(self) -> float:
        """The paper's allocation ratio: the placed tasks' GPU requests over the fleet's GPUs."""
        return 100.0 * self.placed_gpu / self.gpus

    @property
    def held_pct(self) -> float:
        """GPU-equivalents handed out over the fleet's."""
        return 100.0 * self.allocated_eq / self.gpus

    @property
    def arrived_pct(self) -> float:
        return 100.0 * self.arrived_gpu / self.gpus


def run_one(args: tuple[Trace, dict[str, str], str, Split | SplitSpec, int]) -> Run:
    trace, qos, scenario, split, seed = args
    spec = split if isinstance(split, SplitSpec) else SplitSpec(split)
    started = time.perf_counter()
    inventory = fleet(trace, scenario, spec.parts, spec.by_node)
    facts = fleet_facts(inventory)
    classes = {p.name: class_of(p, qos.get(p.name, "")) for p in trace.pods}
    asks = {p.name: ask_of(p, classes[p.name], scenario, facts, spec.training_shared) for p in trace.pods}
    workload = build_workload(trace, seed)
    ledger = Ledger(inventory)
    relayer = MigRelayer(ledger) if spec.relayout and scenario == "classes" else None
    fitter = Fitter(ledger.index, FitContext(get_policy(POLICY, seed=seed), demand_of(list(asks.values()), inventory),
                                             per_class_limit=None, rank=workload.rank, memo=ScoreMemo()))
    gpus = sum(tn.gpus for tn in trace.nodes)
    run = Run(scenario if scenario != "classes" else f"classes {spec.label}", seed, gpus)
    serving_on: list[InstanceId] = []
    for i, pod in enumerate(workload.tasks):
        cls = classes[pod.name]
        label = cls.value if cls is not None else "cpu"
        run.arrived_gpu += pod.gpu_milli_total / MILLI_PER_GPU
        job = JobRequest(EntryId(f"t{i}"), TEAM, (asks[pod.name],))
        if _refused(cls, asks[pod.name]):
            run.failed[label] += 1
            continue
        got = fitter.fit_job(job)
        if isinstance(got, NoFit) and relayer is not None and relayer.relayout_for(job):
            run.relayouts += 1
            got = fitter.fit_job(job)
        if isinstance(got, NoFit):
            run.failed[label] += 1
            continue
        ledger.reserve(job.entry, TEAM, got)
        run.placed[label] += 1
        run.placed_gpu += pod.gpu_milli_total / MILLI_PER_GPU
        for p in got:
            if relayer is not None:
                relayer.held(p.instance_ids)
            run.allocated_eq += p.gpu_equivalents
            run.by_kind[p.kind or ("cpu" if not p.instance_ids else "?")] += 1
            if cls is WorkloadClass.SERVING:
                run.serving_placed += 1
                if p.is_share:
                    serving_on.append(p.share_gpu or p.instance_ids[0])
    tenants = Counter(gid for r in ledger.reservations() for p in r.placements if p.is_share
                      for gid in [p.share_gpu or p.instance_ids[0]])
    run.violations = sum(1 for gid in serving_on if tenants[gid] > 1)
    run.seconds = time.perf_counter() - started
    return run


CLASSES = ("serving", "exploratory", "training")


@dataclass
class ReplayRun:
    scenario: str
    seed: int
    gpus: int
    waits: dict[str, list[float]]
    """The waits (s) per class of the tasks that started."""
    never: Counter[str]
    """The tasks per class still queued when the replay ended."""
    left_out: int
    seconds: float = 0.0
    allocation_pct: float | None = None
    """Time-weighted mean GPU allocation while tasks arrive (the trace's requests over the GPUs)."""
    preempt: dict[str, float] | None = None
    """With `+preempt`: what preemption took and cost (`preempt_figures`)."""

    def pct(self, cls: str, q: float) -> float | None:
        w = self.waits.get(cls, [])
        return float(np.percentile(w, q)) if w else None


def replay_one(args: tuple[Trace, dict[str, str], str, Split | SplitSpec, int, float, float]) -> ReplayRun:
    """One scenario's queueing replay on the seed's node sample, its GPUs as `fleet` builds them."""
    trace, qos, scenario, split, seed, speedup, fraction = args
    spec = split if isinstance(split, SplitSpec) else SplitSpec(split)
    started = time.perf_counter()
    sample = Trace(sample_trace_nodes(trace, fraction, seed), trace.pods)
    inventory = fleet(sample, scenario, spec.parts, spec.by_node)
    facts = fleet_facts(inventory)
    classes = {p.name: class_of(p, qos.get(p.name, "")) for p in trace.pods}
    asks = {p.name: ask_of(p, classes[p.name], scenario, facts, spec.training_shared) for p in trace.pods}
    labels = {name: cls.value if cls is not None else "cpu" for name, cls in classes.items()}
    refused = [p for p in trace.pods if _refused(classes[p.name], asks[p.name])]
    gone = {p.name for p in refused}
    sample = Trace(sample.nodes, tuple(p for p in trace.pods if p.name not in gone))
    result = run_replay(sample, POLICY, ReplayConfig(speedup=speedup, seed=seed), inventory=inventory,
                        ask_of=lambda pod: asks[pod.name], label_of=lambda pod: labels[pod.name],
                        preemption=PreemptPolicy(grace_s=CHECKPOINT_GRACE_S) if spec.preempt else None)
    name = scenario if scenario != "classes" else f"classes {spec.label}"
    never = result.never_by + Counter(labels[p.name] for p in refused if p.runtime_s is not None)
    return ReplayRun(name, seed, sum(tn.gpus for tn in sample.nodes), result.waits_by, never,
                     result.left_out, time.perf_counter() - started, result.mean_util_arrivals_pct,
                     preempt_figures(result.preempt) if result.preempt is not None else None)


def preempt_figures(stats: PreemptStats) -> dict[str, float]:
    """The figures of a replay with preemption, as JSON numbers."""
    return {"preemptions": float(sum(stats.preemptions.values())), "victims": float(len(stats.preemptions)),
            "max_per_victim": float(stats.max_per_victim), "preemptors": float(stats.preemptors),
            "lost_gpu_s": stats.lost_gpu_s, "delivered_gpu_s": stats.delivered_gpu_s, "lost_pct": stats.lost_pct,
            "serving_waited": float(len(stats.serving_waited)),
            "serving_isolated_victim": float(len(stats.serving_isolated_victim)),
            "violations": float(stats.violations), "victims_unfinished": float(stats.victims_unfinished)}


def _refused(cls: WorkloadClass | None, ask: AllocAsk) -> bool:
    """A GPU task whose class has no tier the fleet can serve: the service refuses it at submission
    (unschedulable); it must not run as a CPU-only task."""
    return cls is not None and ask.gpu is None


def report_replay(trace: str, seeds: list[int], speedup: float, fraction: float, runs: list[ReplayRun]) -> None:
    print(f"{trace} trace replay, speedup {speedup:g}, nodes x{fraction:g} ({runs[0].gpus} GPUs on seed "
          f"{runs[0].seed}, all H100 80GB), policy {POLICY}, {len(seeds)} seeds ({seeds[0]}-{seeds[-1]}); "
          f"wait (s) p50 / p95 per class, median over seeds; never started: mean tasks per seed")
    print("| scenario | serving p50 / p95 | exploratory p50 / p95 | training p50 / p95 | never started "
          "serving / exploratory / training | started serving / exploratory / training |")
    print("|---|---|---|---|---|---|")
    by: dict[str, list[ReplayRun]] = {}
    for r in runs:
        by.setdefault(r.scenario, []).append(r)

    def med(rs: list[ReplayRun], cls: str, q: float) -> str:
        got = [v for r in rs if (v := r.pct(cls, q)) is not None]
        return f"{statistics.median(got):,.1f}" if got else "-"

    for name, rs in by.items():
        waits = " | ".join(f"{med(rs, c, 50)} / {med(rs, c, 95)}" for c in CLASSES)
        never = " / ".join(f"{statistics.mean(r.never[c] for r in rs):.1f}" for c in CLASSES)
        started = " / ".join(f"{statistics.mean(len(r.waits.get(c, [])) for r in rs):.0f}" for c in CLASSES)
        print(f"| {name} | {waits} | {never} | {started} |")
    print(f"({runs[0].left_out} tasks that never ran in the trace are left out of every replay)")
    report_preemption(by)


def report_preemption(by: dict[str, list[ReplayRun]]) -> None:
    """Allocation for every row; what preemption took and cost for the `+preempt` rows (mean
    (min-max) over seeds; the worst seed for the counts that must be 0)."""
    print("\n| scenario | allocation % while arriving | preemptions (victims) | GPU-s lost / delivered | "
          "lost % | preemptions per victim, max | preemptors | serving waits offered / with an isolated "
          "preemptible victim | isolation violations | victims never completed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in by.items():
        alloc = [r.allocation_pct for r in rs if r.allocation_pct is not None]
        got = [r.preempt for r in rs if r.preempt is not None]
        cells = [_stats(alloc) if alloc else "-"]
        if got:
            def mean(k: str, g: list[dict[str, float]] = got) -> float:
                return statistics.mean(x[k] for x in g)
            cells += [f"{mean('preemptions'):,.0f} ({mean('victims'):,.0f})",
                      f"{mean('lost_gpu_s'):,.0f} / {mean('delivered_gpu_s'):,.0f}",
                      _stats([x["lost_pct"] for x in got]), f"{max(x['max_per_victim'] for x in got):.0f}",
                      f"{mean('preemptors'):,.0f}",
                      f"{mean('serving_waited'):,.0f} / {mean('serving_isolated_victim'):,.0f}",
                      f"{max(x['violations'] for x in got):.0f}", f"{max(x['victims_unfinished'] for x in got):.0f}"]
        else:
            cells += ["-"] * 8
        print(f"| {name} | " + " | ".join(cells) + " |")


def _stats(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="default", choices=sorted(PODS_CSV))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--splits", default="2:2:4,1:3:4",
                        help="rows of mig:shared:whole parts of the GPUs, each optionally /node, then +relayout, "
                             "+training-shared, +preempt")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--from-json", default=None,
                        help="comma-separated files an earlier run wrote (with --replay: replays) to report together")
    parser.add_argument("--replay", action="store_true", help="the queueing replay: waits p50/p95 per class")
    parser.add_argument("--classes-only", action="store_true",
                        help="leave out (a) and (b) (to add rows to an earlier run with --from-json)")
    parser.add_argument("--speedup", type=float, default=2000.0, help="with --replay: arrivals compressed by this")
    parser.add_argument("--node-fraction", type=float, default=0.2, help="with --replay: the seeded node sample")
    args = parser.parse_args()
    try:
        seeds = _seeds(args.seeds)
        splits = [SplitSpec.parse(s) for s in args.splits.split(",")]
        ReplayConfig(speedup=args.speedup, node_fraction=args.node_fraction)
    except ValueError:
        parser.error("--seeds is FIRST-LAST, --splits a list of mig:shared:whole (three whole numbers, each "
                     "optionally /node then +relayout), "
                     "--speedup above 0, --node-fraction within (0, 1]")
    trace = load_trace(NODES_CSV, PODS_CSV[args.trace])
    if args.replay:
        if args.from_json:
            replays = [_replay_of(d) for path in args.from_json.split(",") for d in json.loads(Path(path).read_text())]
            report_replay(args.trace, sorted({r.seed for r in replays}), args.speedup, args.node_fraction, replays)
            return 0
        if any(sp.relayout for sp in splits):
            parser.error("+relayout rows are measured by the allocation runs only, not --replay")
        return _main_replay(args, trace, seeds, splits)
    if any(sp.preempt for sp in splits):
        parser.error("+preempt rows need the queue replay (--replay): the allocation runs have no departures")
    if args.from_json:
        runs = [_run_of(d) for path in args.from_json.split(",") for d in json.loads(Path(path).read_text())]
        report(args.trace, len(trace.nodes), sorted({r.seed for r in runs}), runs)
        return 0
    qos = qos_of(PODS_CSV[args.trace])
    jobs = [(trace, qos, sc, sp, s) for sc, sp in _scenarios(args, splits) for s in seeds]
    started = time.perf_counter()
    runs, workers = _map(run_one, jobs, args.workers)
    report(args.trace, len(trace.nodes), seeds, runs)
    print(f"({len(runs)} runs, {time.perf_counter() - started:.0f} s wall, {workers} workers)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps([run_json(r) for r in runs], indent=1))
    return 0 if all(math.isfinite(r.allocation_pct) for r in runs) else 1


def _main_replay(args: argparse.Namespace, trace: Trace, seeds: list[int], splits: list[SplitSpec]) -> int:
    qos = qos_of(PODS_CSV[args.trace])
    jobs = [(trace, qos, sc, sp, s, args.speedup, args.node_fraction) for sc, sp in _scenarios(args, splits)
            for s in seeds]
    started = time.perf_counter()
    runs, workers = _map(replay_one, jobs, args.workers)
    report_replay(args.trace, seeds, args.speedup, args.node_fraction, runs)
    print(f"({len(runs)} replays, {time.perf_counter() - started:.0f} s wall, {workers} workers)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps([{**r.__dict__, "never": dict(r.never)} for r in runs], indent=1))
    return 0


def _scenarios(args: argparse.Namespace, splits: list[SplitSpec]) -> list[tuple[str, SplitSpec]]:
    """(a) and (b) unless `--classes-only`, then a classes row per split."""
    baselines = [] if args.classes_only else ["whole", "share"]
    return [(b, SplitSpec((0, 0, 1))) for b in baselines] + [("classes", x) for x in splits]


def _map(fn: Callable[[J], R], jobs: list[J], workers: int | None) -> tuple[list[R], int]:
    """`fn` over the jobs in order, in a pool of processes when more than one worker is asked for."""
    n = min(len(jobs), workers or os.cpu_count() or 1)
    if n <= 1:
        return [fn(j) for j in jobs], n
    with ProcessPoolExecutor(max_workers=n) as pool:
        return list(pool.map(fn, jobs)), n


def run_json(r: Run) -> dict[str, Any]:
    return {**{k: v for k, v in r.__dict__.items() if not isinstance(v, Counter)}, "placed": dict(r.placed),
            "failed": dict(r.failed), "by_kind": dict(r.by_kind)}


def _replay_of(d: dict[str, Any]) -> ReplayRun:
    return ReplayRun(**{**{k: v for k, v in d.items() if k in ReplayRun.__dataclass_fields__},
                        "never": Counter(d["never"])})


def _run_of(d: dict[str, Any]) -> Run:
    counters = {k: Counter(d[k]) for k in ("placed", "failed", "by_kind")}
    return Run(**{**{k: v for k, v in d.items() if k in Run.__dataclass_fields__}, **counters})


def report(trace: str, nodes: int, seeds: list[int], runs: list[Run]) -> None:
    by: dict[str, list[Run]] = {}
    for r in runs:
        by.setdefault(r.scenario, []).append(r)
    print(f"{trace} trace, {nodes} nodes, {runs[0].gpus} GPUs (all H100 80GB), {len(seeds)} seeds "
          f"({seeds[0]}-{seeds[-1]}), policy {POLICY}; mean (min-max) over seeds")
    print("| scenario | arrived % | allocation % | GPU-eq held % | serving violations | failed serving / "
          "exploratory / training | placed as whole / mig / share |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in by.items():
        kinds = {k: statistics.mean(r.by_kind[k] for r in rs) for k in ("whole", "mig", "share")}
        fails = "/".join(f"{statistics.mean(r.failed[c] for r in rs):.0f}"
                         for c in ("serving", "exploratory", "training"))
        print(f"| {name} | {_stats([r.arrived_pct for r in rs])} | {_stats([r.allocation_pct for r in rs])} | "
              f"{_stats([r.held_pct for r in rs])} | {_stats([float(r.violations) for r in rs])} of "
              f"{statistics.mean(r.serving_placed for r in rs):.0f} | {fails} | "
              f"{kinds['whole']:.0f} / {kinds['mig']:.0f} / {kinds['share']:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
