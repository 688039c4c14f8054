"""Multi-GPU training jobs on NVLink-connected GPUs: how often they get them, what it costs in waits and allocation.

A replay through the service's own scheduling cycle (frag-aware, the default policy) on a fleet of
8-GPU nodes whose topology the project's plugin publishes, three ways:

- `any`: the nodes' topology is hidden from the core (the stock plugin: "any N GPUs", today's rule);
  the class of each set is then read from the real topology afterwards;
- `topology`: the core sees the topology (NVLink set first, then one NUMA node, then anything);
- `oracle`: the core sees it and a multi-GPU job takes nothing but an NVLink set (it waits instead);
- two variants of `topology` for comparison: `sets-only` (which GPUs of a node, without the score
  term between nodes) and `above` (the term above every fragmentation key instead of beside best fit).

Fleets: `pairs` (PCIe A100s bridged GPU 2k to 2k+1, two sockets of 4 GPUs), `sockets` (two sockets,
no NVLink), `mixed` (half `pairs`, half NVSwitch boards). Workloads: `openb` (the openb default trace's
tasks, arrivals compressed by --speedup; its 74 multi-GPU tasks are the ones measured, its one-GPU and
fractional tasks the load around them; GPU models dropped, every node takes every task) and
`synthetic` (Poisson arrivals of 1-, 2-, 4- and 8-GPU jobs, 40/25/20/15 %, exponential runtimes, at
--load of the fleet). Usage:

    .venv/bin/python benchmarks/topology.py --fleet pairs --workload synthetic --seeds 1-5 [--json out.json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from nomad_gpu.domain import fragaware
from nomad_gpu.domain.cycle import Admit, CycleConfig, run_cycle
from nomad_gpu.domain.fragmentation import Demand
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, Node
from nomad_gpu.domain.kinds.whole import WHOLE
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, WholeGpus
from nomad_gpu.domain.topochoice import choose
from nomad_gpu.domain.topology import GpuPlace, LinkClass, Topology
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, load_trace

MODEL = "NVIDIA A100 80GB PCIe"
TEAM = Team("bench")
MODES = ("any", "topology", "oracle", "sets-only", "above")
DEFAULT_MODES = ("any", "topology", "oracle")


@dataclass(frozen=True)
class Job:
    arrival: float
    gpus: int
    milli: int
    """Per GPU (below 1000 only for one-GPU fractional tasks)."""
    runtime: float
    cpu: int = 1000
    memory: int = 1024


def node_topology(name: str, kind: str) -> Topology:
    gpu = [InstanceId(f"{name}/gpu{k}") for k in range(8)]
    if kind == "pairs":
        return Topology.of({gpu[k]: GpuPlace(k // 4, k // 2, False, ((gpu[k ^ 1], 4),)) for k in range(8)})
    if kind == "nvswitch":
        return Topology.of({gpu[k]: GpuPlace(k // 4, k // 2, True) for k in range(8)})
    return Topology.of({gpu[k]: GpuPlace(k // 4, k // 2) for k in range(8)})  # two sockets, no NVLink


def fleet(kind: str, nodes: int) -> Inventory:
    out = []
    for i in range(nodes):
        name = f"n{i:03d}"
        shape = {"pairs": "pairs", "sockets": "sockets", "mixed": "pairs" if i % 2 == 0 else "nvswitch"}[kind]
        gpus = tuple(Gpu(InstanceId(f"{name}/gpu{k}"), MODEL, 81920, mode=GpuMode.FLEX) for k in range(8))
        out.append(Node(NodeId(name), name=name, cpu_mhz=256_000, memory_mb=2_097_152, gpus=gpus,
                        topology=node_topology(name, shape)))
    return Inventory.of(out)


def openb_jobs(speedup: float) -> list[Job]:
    trace = load_trace(NODES_CSV, PODS_CSV["default"])
    out = []
    for p in trace.pods:
        if p.runtime_s is None or p.gpu_milli == 0 or p.num_gpu == 0:
            continue
        out.append(Job(p.creation_time / speedup, p.num_gpu, p.gpu_milli if p.num_gpu == 1 else MILLI_PER_GPU,
                       p.runtime_s, min(p.cpu_milli, 64_000), min(p.memory_mib, 262_144)))
    return sorted(out, key=lambda j: j.arrival)


def synthetic_jobs(seed: int, gpus: int, load: float, count: int) -> list[Job]:
    rng = random.Random(seed)
    sizes, weights = (1, 2, 4, 8), (40, 25, 20, 15)
    mean_gpus = sum(s * w for s, w in zip(sizes, weights, strict=True)) / sum(weights)
    mean_runtime = 3600.0
    rate = load * gpus / (mean_gpus * mean_runtime)  # arrivals per second that keep `load` of the fleet busy
    t, out = 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        out.append(Job(t, rng.choices(sizes, weights)[0], MILLI_PER_GPU, rng.expovariate(1 / mean_runtime)))
    return out


@contextmanager
def variant(mode: str) -> Iterator[None]:
    """`sets-only`: no score term; `above`: the term above every key of frag-aware (its first design)."""
    term, plain, large = WHOLE.set_term, fragaware._TIER_PLAIN, fragaware._TIER_LARGE
    if mode == "sets-only":
        WHOLE.set_term = None
    elif mode == "above":
        fragaware._TIER_PLAIN, fragaware._TIER_LARGE = 128.0, 2.0  # above FGD's 0-100, above fold_large's 0-1
    try:
        with nvlink_only() if mode == "oracle" else _nothing():
            yield
    finally:
        WHOLE.set_term, fragaware._TIER_PLAIN, fragaware._TIER_LARGE = term, plain, large


@contextmanager
def nvlink_only() -> Iterator[None]:
    """The oracle: a multi-GPU ask is offered a node's NVLink set or nothing there."""
    def sets(nf: Any, model: str, ids: Any, count: int) -> Iterator[tuple[InstanceId, ...]]:
        topology = nf.node.topology
        chosen = choose(topology, ids, count)
        if count < 2 or (topology is not None and topology.link_class(chosen) is LinkClass.NVLINK):
            yield chosen

    before = WHOLE.sets
    WHOLE.sets = sets
    try:
        yield
    finally:
        WHOLE.sets = before


def replay(inventory: Inventory, jobs: list[Job], mode: str, policy: str = "frag-aware") -> dict[str, Any]:
    truth = {n.id: n.topology for n in inventory}
    if mode == "any":
        inventory = Inventory.of(replace(n, topology=None) for n in inventory)
    gpus = sum(len(n.gpus) for n in inventory)
    ledger = Ledger(inventory)
    cycle = CycleConfig(policy=policy)
    arrivals = deque(enumerate(jobs))
    queue: dict[EntryId, tuple[float, JobRequest, Job]] = {}
    running: list[tuple[float, EntryId, int]] = []
    recent: deque[JobRequest] = deque(maxlen=2000)
    demand, since = Demand(()), 0
    holds: dict[EntryId, frozenset[NodeId]] = {}
    waits: list[float] = []
    multi_waits: list[float] = []
    classes: Counter[str] = Counter()
    used, util, times = 0, [], []
    start = jobs[0].arrival if jobs else 0.0
    t0 = time.monotonic()
    with variant(mode):
        while arrivals or running:
            now = min(arrivals[0][1].arrival if arrivals else float("inf"), running[0][0] if running else float("inf"))
            while running and running[0][0] <= now:
                _, entry, milli = heapq.heappop(running)
                ledger.release(entry)
                used -= milli
            while arrivals and arrivals[0][1].arrival <= now:
                i, job = arrivals.popleft()
                gpu = (GpuShare(job.milli) if job.gpus == 1 and job.milli < MILLI_PER_GPU else WholeGpus(job.gpus))
                request = JobRequest(EntryId(f"j{i}"), TEAM, (AllocAsk("task", 0, job.cpu, job.memory, gpu),),
                                     submitted_at=job.arrival)
                queue[request.entry] = (job.arrival, request, job)
                recent.append(request)
                since += 1
            if since >= 250 or not demand.shapes:
                demand, since = Demand.from_jobs(recent), 0
            if queue:
                got = run_cycle(ledger, [q[1] for q in queue.values()], now=now, config=cycle, holds=holds,
                                demand=demand)
                holds = dict(got.holds)
                for decision in got.decisions:
                    if not isinstance(decision, Admit):
                        continue
                    at, _, job = queue.pop(decision.entry)
                    milli = job.gpus * job.milli
                    heapq.heappush(running, (now + job.runtime, decision.entry, milli))
                    used += milli
                    waits.append(now - at)
                    if job.gpus > 1:
                        multi_waits.append(now - at)
                        (p,) = decision.placements
                        got_class = truth[p.node].link_class(p.instance_ids) if truth[p.node] else LinkClass.PCIE
                        classes[got_class.label if got_class else "-"] += 1
            times.append(now - start)
            util.append(100.0 * used / (gpus * MILLI_PER_GPU))
    multi = sum(classes.values())
    t = np.array(times)
    last_arrival = (jobs[-1].arrival - start) if jobs else 0.0
    u = np.array(util[:-1])
    tt = np.minimum(t, last_arrival)
    alloc = float((u * np.diff(tt)).sum() / (tt[-1] - tt[0])) if len(tt) > 1 and tt[-1] > tt[0] else 0.0
    return {
        "mode": mode, "jobs": len(jobs), "started": len(waits), "never_started": len(queue),
        "multi_gpu": multi, "nvlink_pct": round(100.0 * classes[LinkClass.NVLINK.label] / multi, 1) if multi else 0.0,
        "classes": dict(classes),
        "wait_p50_s": _pct(waits, 50), "wait_p95_s": _pct(waits, 95),
        "multi_wait_p50_s": _pct(multi_waits, 50), "multi_wait_p95_s": _pct(multi_waits, 95),
        "alloc_while_arriving_pct": round(alloc, 2), "seconds": round(time.monotonic() - t0, 1),
    }


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else 0.0


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", choices=("pairs", "sockets", "mixed"), default="pairs")
    parser.add_argument("--workload", choices=("synthetic", "openb"), default="synthetic")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--seeds", default="1", help="synthetic workload seeds, e.g. 1-5")
    parser.add_argument("--load", type=float, default=0.9, help="synthetic: offered load, share of the fleet")
    parser.add_argument("--jobs", type=int, default=2000, help="synthetic: jobs per seed")
    parser.add_argument("--speedup", type=float, default=40.0, help="openb: arrivals compressed by this")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(MODES) or args.nodes < 1:
        print(f"error: --modes takes {', '.join(MODES)}; --nodes at least 1", file=sys.stderr)
        return 2
    inventory = fleet(args.fleet, args.nodes)
    seeds = _seeds(args.seeds) if args.workload == "synthetic" else [0]
    runs = []
    for seed in seeds:
        jobs = (synthetic_jobs(seed, 8 * args.nodes, args.load, args.jobs) if args.workload == "synthetic"
                else openb_jobs(args.speedup))
        for mode in modes:
            result = {"fleet": args.fleet, "workload": args.workload, "seed": seed, **replay(inventory, jobs, mode)}
            runs.append(result)
            print(json.dumps(result), file=sys.stderr)
    cols = ("nvlink_pct", "wait_p50_s", "wait_p95_s", "multi_wait_p50_s", "multi_wait_p95_s",
            "alloc_while_arriving_pct", "never_started")
    print(f"{args.fleet} fleet, {args.nodes} nodes, {args.workload}"
          + (f", load {args.load}, {args.jobs} jobs, seeds {args.seeds}" if args.workload == "synthetic"
             else f", speedup {args.speedup}"))
    print("| mode | over seeds | " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * len(cols))
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        for name, how in (("median", statistics.median), ("mean", statistics.mean)):
            print(f"| {mode} | {name} | " + " | ".join(f"{how(r[c] for r in mine):,.1f}" for c in cols) + " |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(runs, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
