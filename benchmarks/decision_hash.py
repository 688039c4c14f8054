"""One SHA-256 over the engine's decisions on a seeded queue and fleet: a change meant to make the service
cheaper must print the same hash before and after.

For each policy, a seeded fleet (whole, shared and MIG GPUs of several models, pools, datacenters, nodes
down or ineligible) takes a seeded queue over several pure cycles (`domain/cycle.run_cycle`), with some
admitted entries released between cycles; every decision, hold and the order of the waiting is hashed.
Then every job of the queue is asked "could it ever run here?" (`domain/feasible.never_runs`) on the fleet
as the service passes it to the submission check: the whole fleet, or its distinct shapes where
`feasible.shapes` exists; the verdicts are hashed too.

    python benchmarks/decision_hash.py [--seed 7] [--nodes 120] [--jobs 400] [--cycles 6]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys

from nomad_gpu.domain import feasible
from nomad_gpu.domain.cycle import Admit, CycleConfig, run_cycle
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, MigSlice, Node, NodeStatus
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.policies import POLICIES
from nomad_gpu.domain.requests import AllocAsk, GpuAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L40S")
PROFILES = ("1g.10gb", "3g.40gb", "7g.80gb")


def fleet(rng: random.Random, n: int) -> list[Node]:
    nodes = []
    for k in range(n):
        name = f"node-{k:04d}"
        model = rng.choice(MODELS)
        kind = rng.random()
        gpus: tuple[Gpu, ...] = ()
        migs: tuple[MigSlice, ...] = ()
        if kind < 0.6:
            gpus = tuple(Gpu(InstanceId(f"GPU-{name}-{i}"), model, 81_920, healthy=rng.random() > 0.02)
                         for i in range(rng.choice((4, 8, 8, 8))))
        elif kind < 0.8:
            gpus = tuple(Gpu(InstanceId(f"GPU-{name}-s{i}"), model, 81_920, mode=GpuMode.SHARED,
                             max_tenants=rng.choice((2, 4))) for i in range(rng.choice((2, 4))))
        else:
            profile = MigProfile.parse(rng.choice(PROFILES))
            migs = tuple(MigSlice(InstanceId(f"MIG-{name}-{i}"), MODELS[1], profile, profile.memory_gb * 1024)
                         for i in range(rng.choice((2, 4))))
        nodes.append(Node(NodeId(name), name=name, datacenter=rng.choice(("dc1", "dc1", "dc2")),
                          node_pool=rng.choice(("default", "default", "default", "reserved")),
                          status=NodeStatus.DOWN if rng.random() < 0.03 else NodeStatus.READY,
                          eligible=rng.random() > 0.03, cpu_mhz=rng.choice((64_000, 128_000)),
                          memory_mb=rng.choice((512_000, 1_048_576)), gpus=gpus, migs=migs))
    return nodes


def gpu_ask(rng: random.Random) -> GpuAsk | None:
    kind = rng.random()
    if kind < 0.55:
        models = frozenset(rng.sample(MODELS, 1)) if rng.random() < 0.3 else frozenset()
        return WholeGpus(rng.choice((1, 1, 1, 2, 4, 8, 9)), models)
    if kind < 0.75:
        return GpuShare(rng.choice((250, 500, 700)))
    if kind < 0.95:
        return MigSlices(rng.choice((*PROFILES, "2g.20gb")), rng.choice((1, 1, 2, 5)))
    return None


def queue(rng: random.Random, n: int) -> list[JobRequest]:
    jobs = []
    for i in range(n):
        groups = rng.choice((1, 1, 1, 2))
        asks = tuple(AllocAsk(f"g{g}", 0, rng.choice((1000, 4000, 200_000)), rng.choice((1024, 600_000)),
                              gpu_ask(rng)) for g in range(groups))
        jobs.append(JobRequest(EntryId(f"q{i:06d}"), Team(f"team{i % 4}"), asks, rng.choice((30, 50, 50, 70)),
                               float(i), frozenset(rng.choice(((), ("dc1",), ("dc*",)))),
                               rng.choice((None, "default", "reserved", "all")), groups > 1 and rng.random() < 0.5))
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nodes", type=int, default=120)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--cycles", type=int, default=6)
    args = parser.parse_args()
    digest = hashlib.sha256()
    decisions = 0
    for policy in sorted(POLICIES):
        rng = random.Random(f"{args.seed}/{policy}")
        nodes = fleet(rng, args.nodes)
        waiting = queue(rng, args.jobs)
        ledger = Ledger(Inventory.of(nodes))
        config = CycleConfig(policy=policy, hol_threshold_s=30.0)
        holds = None
        for cycle in range(args.cycles):
            result = run_cycle(ledger, waiting, now=100.0 + 20 * cycle, config=config, holds=holds)
            holds = result.holds
            digest.update(f"{policy}/{cycle}:{result.decisions!r}:{sorted(result.holds.items())!r}\n".encode())
            decisions += len(result.decisions)
            admitted = {d.entry for d in result.decisions if isinstance(d, Admit)}
            waiting = [j for j in waiting if j.entry not in admitted]
            for entry in sorted(admitted):
                if rng.random() < 0.5:
                    ledger.release(entry)
        checked = getattr(feasible, "shapes", list)(ledger.inventory)
        for job in queue(rng, args.jobs):
            digest.update(f"{job.entry}:{feasible.never_runs(job, checked)}\n".encode())
    print(f"{digest.hexdigest()}  ({decisions} decisions, {len(POLICIES)} policies, seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
