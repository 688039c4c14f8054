"""Engine benchmark: a synthetic cluster and queue, cycles until nothing more fits, timed per decision.

The cluster mixes whole-GPU nodes of two models, MIG-partitioned nodes and nodes with shared GPUs;
the queue mixes whole-GPU (1-8), MIG and share requests across teams and priorities. It drives
the same `run_cycle` the service runs, so its figures are the service's decision cost.
"""

from __future__ import annotations

import gc
import random
import resource
import statistics
import time
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.cycle import Admit, CycleConfig, run_cycle
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.requests import AllocAsk, GpuAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
MIG_LAYOUT = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")


@dataclass(frozen=True)
class BenchConfig:
    nodes: int = 1000
    gpus_per_node: int = 8
    queued: int = 10000
    teams: int = 8
    seed: int = 0
    policy: str = "frag-aware"
    mig_node_share: float = 0.1
    shared_node_share: float = 0.1


def build_cluster(cfg: BenchConfig) -> Inventory:
    rng = random.Random(cfg.seed)
    nodes = []
    for i in range(cfg.nodes):
        model = MODELS[i % len(MODELS)]
        roll = rng.random()
        gpus: list[Gpu] = []
        migs: list[MigSlice] = []
        for g in range(cfg.gpus_per_node):
            gid = InstanceId(f"GPU-{i:05d}-{g}")
            if roll < cfg.mig_node_share and g < cfg.gpus_per_node // 2:
                for k, prof in enumerate(MIG_LAYOUT):
                    migs.append(MigSlice(InstanceId(f"MIG-{i:05d}-{g}-{k}"), model, MigProfile.parse(prof), 10240))
            elif roll > 1 - cfg.shared_node_share and g < cfg.gpus_per_node // 2:
                gpus.append(Gpu(gid, model, 81920, mode=GpuMode.SHARED))
            else:
                gpus.append(Gpu(gid, model, 81920))
        nodes.append(Node(NodeId(f"node-{i:05d}"), name=f"node-{i:05d}", cpu_mhz=128_000, memory_mb=1_048_576,
                          gpus=tuple(gpus), migs=tuple(migs)))
    return Inventory.of(nodes)


def build_queue(cfg: BenchConfig) -> list[JobRequest]:
    rng = random.Random(cfg.seed + 1)
    jobs = []
    for j in range(cfg.queued):
        roll = rng.random()
        gpu: GpuAsk
        if roll < 0.70:
            count = rng.choices((1, 2, 4, 8), weights=(60, 20, 12, 8))[0]
            models = frozenset({MODELS[rng.randrange(2)]}) if rng.random() < 0.3 else frozenset()
            gpu = WholeGpus(count, models)
        elif roll < 0.85:
            gpu = MigSlices(rng.choice(("1g.10gb", "2g.20gb", "3g.40gb")))
        else:
            gpu = GpuShare(rng.choice((100, 250, 500)))
        ask = AllocAsk("main", 0, 2000 * gpu.count, 16384, gpu)
        jobs.append(JobRequest(EntryId(f"j{j:07d}"), Team(f"team-{rng.randrange(cfg.teams)}"), (ask,),
                               priority=rng.choice((30, 50, 50, 50, 70)), submitted_at=float(j) * 0.001))
    return jobs


def run(cfg: BenchConfig) -> dict[str, Any]:
    inventory = build_cluster(cfg)
    queue = build_queue(cfg)
    ledger = Ledger(inventory)
    config = CycleConfig(policy=cfg.policy, hol_threshold_s=1e12)
    timings: list[float] = []
    cycle_s = 0.0
    admitted = cycles = 0
    now = float(cfg.queued)
    gc.collect()
    gc.disable()  # the benchmark measures the engine, not the collector's pauses
    started = time.perf_counter()
    try:
        while queue:
            t0 = time.perf_counter()
            result = run_cycle(ledger, queue, now=now, config=config, clock=time.perf_counter)
            cycle_s += time.perf_counter() - t0
            cycles += 1
            timings.extend(result.decision_s)
            got = {d.entry for d in result.decisions if isinstance(d, Admit)}
            if not got:
                break
            admitted += len(got)
            queue = [j for j in queue if j.entry not in got]
    finally:
        gc.enable()
    wall = time.perf_counter() - started
    timings.sort()
    gpus = sum(len(n.gpus) + len({m.id.rsplit("-", 1)[0] for m in n.migs}) for n in inventory)
    return {
        "nodes": cfg.nodes, "gpus": gpus, "queued": cfg.queued, "admitted": admitted, "cycles": cycles,
        "decisions": len(timings), "policy": cfg.policy,
        # whole cycles (ordering, fair share, holds included), not just the per-decision sum
        "decisions_per_s": round(len(timings) / cycle_s, 1) if cycle_s else 0.0,
        "decision_us_p50": round(statistics.median(timings) * 1e6, 1) if timings else 0.0,
        "decision_us_p99": round(timings[int(0.99 * (len(timings) - 1))] * 1e6, 1) if timings else 0.0,
        "wall_s": round(wall, 2),
        "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
