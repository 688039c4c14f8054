"""The paper's per-seed workload: task order, resampled copies, node priority and typical demand.

What `published_allocation_ratio.csv` measures depends on these details as much as on the policy
(see docs/packing.md), so they follow the paper's simulator step by step, on Go's random stream
(`gorand`) seeded with the run's seed:

1. one draw is spent (the simulator logs `rand.Int()` after seeding);
2. the original tasks, sorted by name, are shuffled (`rand.Shuffle`);
3. copies drawn uniformly with replacement from the name-sorted original list are appended while
   the summed GPU request stays within `tune` x capacity; the test compares the per-GPU milli of
   the candidate copy but adds its total, so an 8-GPU copy may overshoot slightly;
4. the scheduler starts (`INFORMER_DRAWS`), then the nodes, sorted by name, get a random priority
   (`rand.Perm`): node i ranks `perm[i]`, and a tie in score goes to the lowest rank.

The typical demand that FGD (and our frag-aware policy) expects is taken from the original tasks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from nomad_gpu.domain.fragmentation import Demand, Shape
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import NodeId
from nomad_gpu.sim.gorand import GoRand
from nomad_gpu.sim.trace import Trace, TracePod

INFORMER_DRAWS = 10
"""Draws the simulator's scheduler spends between tuning and the node permutation: each of its
Kubernetes informers draws one `rand.Float64()` (the watch timeout) as it starts. With 10, every
published BestFit and FGD curve is reproduced point for point (docs/packing.md)."""
TYPICAL_COVERAGE = 0.95
"""Typical shapes cover this share of the original tasks (the paper's 95 %)."""


@dataclass(frozen=True)
class Workload:
    seed: int
    tasks: tuple[TracePod, ...]
    """Arrival order: the shuffled originals, then the resampled copies."""
    originals: int
    """How many of `tasks` are original tasks (the rest are copies)."""
    rank: dict[NodeId, int]
    """Node priority for ties, lower wins."""


def build_workload(trace: Trace, seed: int, tune: float = 1.3) -> Workload:
    rng = GoRand(seed)
    rng.int63()  # rand.Int()
    by_name = sorted(trace.pods, key=lambda p: p.name)
    order = list(by_name)

    def swap(i: int, j: int) -> None:
        order[i], order[j] = order[j], order[i]

    rng.shuffle(len(order), swap)
    target = tune * float(trace.gpu_milli_capacity)
    asked = sum(p.gpu_milli_total for p in order)
    if tune > 0 and float(asked) < target:
        while True:
            pod = by_name[rng.intn(len(by_name))]
            if float(asked + pod.gpu_milli) > target:
                break
            asked += pod.gpu_milli_total
            order.append(pod)
    elif tune > 0:
        while float(asked) > target and order:
            asked -= order.pop(rng.intn(len(order))).gpu_milli_total
    for _ in range(INFORMER_DRAWS):
        rng.float64()
    nodes = sorted(n.name for n in trace.nodes)
    perm = rng.perm(len(nodes))
    rank = {NodeId(name): perm[i] for i, name in enumerate(nodes)}
    return Workload(seed, tuple(order), min(len(order), len(trace.pods)), rank)


def typical_demand(trace: Trace, coverage: float = TYPICAL_COVERAGE) -> Demand:
    """The typical-ask distribution of the original tasks (CPU-only tasks included), its large
    shapes weighted by the room the empty cluster has for them (`Demand.scarce_on`; the packing
    experiment re-weighs them as placements take that room)."""
    counts: Counter[Shape] = Counter()
    for pod in trace.pods:
        shape = Shape.of(pod.to_ask())
        if shape is not None:
            counts[replace(shape, label=pod.spec) if shape.gpus else shape] += 1
    empty = (NodeFree.of(node, ()) for node in trace.inventory)
    return Demand.from_shapes(counts, coverage).scarce_on(empty)
