"""Which of a node's free GPUs a whole-GPU ask takes, when the node publishes its topology.

Today's rule (no topology: the stock plugin) takes the first `count` free GPUs in device order, and
that stays exactly so wherever the topology is unknown, so that every decision on such a fleet is
unchanged. With a topology, a multi-GPU ask takes, in this order of preference:

1. an NVLink set (every GPU has an NVLink peer in the set): one NVSwitch fabric, or whole bridged
   pairs; among those, the fewest NVLink groups, then the fewest NUMA nodes, then the set that splits
   the fewest groups (taking a whole pair rather than half of a fabric), then device order;
2. a set under one PCIe switch, then on one NUMA node (the smallest such group that holds it);
3. anything.

Outside an NVLink set, and for single-GPU asks, GPUs whose NVLink partners are already taken go first:
a 1-GPU job should not break a free pair that a 4-GPU job needs later. That is the cost this module
pays in packing, and benchmarks/topology.py measures it.

Importing this module installs the hooks of the whole-GPU kind (`WHOLE.sets`, `WHOLE.set_term`, `WHOLE.choose`);
the default policy imports it, so every fitter that can run it has them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import product
from typing import TYPE_CHECKING

from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.kinds.base import Option
from nomad_gpu.domain.kinds.whole import WHOLE
from nomad_gpu.domain.topology import LinkClass, Topology, link_class

if TYPE_CHECKING:
    from nomad_gpu.domain.freeindex import NodeFree
    from nomad_gpu.domain.inventory import Node

MAX_COMBINATIONS = 4096
"""Bound on the NVLink part combinations tried per node and ask (pairs of a 16-GPU node: 256)."""


def choose(topology: Topology | None, free: Sequence[InstanceId], count: int) -> tuple[InstanceId, ...]:
    """`count` GPUs out of `free` (in device order); fewer than `count` free: the empty tuple."""
    if len(free) < count or count < 1:
        return ()
    if topology is None:
        return tuple(free[:count])  # no topology: today's rule, decision for decision
    if count == 1:
        return (lone_first(topology, free)[0],)
    linked = _nvlink_set(topology, free, count)
    if linked is not None:
        return linked
    ordered = lone_first(topology, free)
    for key in (_switch, _numa):
        groups: dict[int, list[InstanceId]] = {}
        for gpu in ordered:
            k = key(topology, gpu)
            if k is not None:
                groups.setdefault(k, []).append(gpu)
        fits = [g for g in groups.values() if len(g) >= count]
        if fits:
            best = min(fits, key=lambda g: (len(g), free.index(g[0])))
            return _in_device_order(free, best[:count])
    return _in_device_order(free, ordered[:count])


def topology_sets(nf: NodeFree, model: str, free: Sequence[InstanceId], count: int
                  ) -> Iterator[tuple[InstanceId, ...]]:
    """`WHOLE.sets`: the one set `choose` takes on the node (today's first `count` without topology)."""
    yield choose(nf.node.topology, free, count)


def topology_term(nf: NodeFree, opt: Option) -> float:
    """`WHOLE.set_term`: 1 for a multi-GPU set that is NVLink-connected, else 0 (also for one GPU and on
    nodes that publish no topology, so that such fleets score as before). One NUMA node or PCIe switch
    is preferred inside a node (`choose`) but not between nodes: as a term it outranked best fit and
    cost 18 % on the mean p95 wait of a two-socket fleet without NVLink (docs/topology.md)."""
    topology = nf.node.topology
    if topology is None or len(opt.instance_ids) < 2:
        return 0.0
    return 1.0 if topology.link_class(opt.instance_ids) is LinkClass.NVLINK else 0.0


def gpu_set_link(node: Node, ids: Sequence[InstanceId]) -> LinkClass | None:
    """The link class of a placement's instances when they are two or more of the node's GPUs (a whole-GPU
    set; MIG and share instances are not GPUs of the node); `PCIE` where the node publishes no topology."""
    if len(set(ids)) < 2 or not set(ids) <= {g.id for g in node.gpus}:
        return None
    return link_class(node.topology, ids)


def lone_first(topology: Topology, free: Sequence[InstanceId]) -> list[InstanceId]:
    """Free GPUs with those that break no free NVLink group first (their partners are taken), then by
    how few free partners they have; device order otherwise."""
    partners = {g: sum(1 for h in free if topology.nvlinked(g, h)) for g in free}
    return sorted(free, key=lambda g: (partners[g], free.index(g)))


def _nvlink_set(topology: Topology, free: Sequence[InstanceId], count: int) -> tuple[InstanceId, ...] | None:
    parts = _components(topology, free)
    choices: list[list[int]] = []
    for members in parts:
        clique = all(topology.nvlinked(a, b) for a in members for b in members if a != b)
        sizes = [0] + (list(range(2, min(len(members), count) + 1)) if clique
                       else ([len(members)] if len(members) <= count else []))
        choices.append(sizes)
    best: tuple[tuple[int, int, int, int], tuple[InstanceId, ...]] | None = None
    tried = 0
    for takes in product(*choices):
        if sum(takes) != count:
            continue
        tried += 1
        if tried > MAX_COMBINATIONS:
            break
        chosen: list[InstanceId] = []
        for members, take in zip(parts, takes, strict=True):
            chosen.extend(_pick(topology, members, take))
        numa = {_numa(topology, g) for g in chosen}
        key = (sum(1 for t in takes if t), len(numa), sum(1 for t, m in zip(takes, parts, strict=True)
                                                         if 0 < t < len(m)), min(free.index(g) for g in chosen))
        if best is None or key < best[0]:
            best = (key, _in_device_order(free, chosen))
    # Each part is two or more GPUs of one fabric, or a whole connected group: every GPU has a peer.
    return best[1] if best is not None else None


def _pick(topology: Topology, members: list[InstanceId], take: int) -> list[InstanceId]:
    """`take` GPUs of one NVLink group: all of it, or (of a fabric) those on its most common NUMA node first."""
    if take >= len(members):
        return list(members)
    numa = [_numa(topology, g) for g in members]
    common = max(set(numa), key=lambda n: (numa.count(n), -(n if n is not None else -1)))
    return sorted(members, key=lambda g: (_numa(topology, g) != common, members.index(g)))[:take]


def _components(topology: Topology, free: Sequence[InstanceId]) -> list[list[InstanceId]]:
    """The free GPUs' NVLink-connected groups of two or more, each in device order."""
    seen: set[InstanceId] = set()
    out = []
    for start in free:
        if start in seen:
            continue
        group, todo = [start], [start]
        seen.add(start)
        while todo:
            a = todo.pop()
            for b in free:
                if b not in seen and topology.nvlinked(a, b):
                    seen.add(b)
                    group.append(b)
                    todo.append(b)
        if len(group) > 1:
            out.append(sorted(group, key=free.index))
    return out


def _switch(topology: Topology, gpu: InstanceId) -> int | None:
    place = topology.place(gpu)
    return place.switch if place is not None else None


def _numa(topology: Topology, gpu: InstanceId) -> int | None:
    place = topology.place(gpu)
    return place.numa if place is not None else None


def _in_device_order(free: Sequence[InstanceId], chosen: Sequence[InstanceId]) -> tuple[InstanceId, ...]:
    picked = set(chosen)
    return tuple(g for g in free if g in picked)


WHOLE.sets = topology_sets
WHOLE.set_term = topology_term
WHOLE.choose = choose
