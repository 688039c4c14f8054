"""Could this job ever run on this fleet? The check behind refusing what can only wait forever.

A job that asks for 9 GPUs on a fleet of 8-GPU nodes, for a model or a MIG profile no node has, or for
more memory than any node holds, is not waiting for capacity: nothing that frees up will ever admit it.
Slurm refuses such a job at `sbatch`; we refuse it at submission, with the nearest thing the fleet does
offer, and an entry that becomes such a job later (its nodes were removed) says so in its wait reason.

"The fleet" is every node Nomad lists, down, ineligible and draining ones too (they may come back), at
its full size, not what is free now; only the job's node pool and datacenters narrow it. A MIG-mode GPU
counts with every profile its model supports (a re-layout can make any of them, DESIGN 15; the tables
are `miglayout.py`'s). Pure: the caller passes the nodes.

What the check reads of a node is its shape, never its identity, so `shapes` (one node of each shape)
answers every question the whole fleet does: a fleet of 1,000 alike nodes is checked as one, and a
submission costs the same on a large fleet as on a small one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice, product

from nomad_gpu.domain import topochoice  # noqa: F401  # installs WHOLE.choose: an NVLink ask's sets, as placed
from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.requests import AllocAsk, JobRequest


@dataclass(frozen=True)
class Never:
    """Why no node could ever run the job, said with the nearest thing the fleet offers."""

    detail: str

    def __str__(self) -> str:
        return self.detail


def never_runs(job: JobRequest, fleet: Iterable[Node]) -> Never | None:
    """None when some node of the fleet, empty and at full size, could hold the whole job; else why not."""
    nodes = list(fleet)
    if any(a.tiers for a in job.asks):  # asks with alternatives: it runs if some choice of them does
        choices = list(islice(product(*(a.alternatives() for a in job.asks)), 256))
        whys = [never_runs(replace(job, asks=tuple(choice)), nodes) for choice in choices]
        return None if any(why is None for why in whys) else whys[0]
    anywhere = replace(job, avoid_nodes=frozenset(), drivers=frozenset())
    scope = [n for n in nodes if anywhere.places_on(n)]
    if not scope:
        return Never(_no_scope(job, nodes))
    if any(_holds(job.asks, n) for n in scope):
        return None
    why = _nearest(job.asks, scope)
    if job.node_pool is not None or job.datacenters - {"*"}:
        if any(_holds(job.asks, n) for n in nodes):
            why += " (nodes outside its node pool or datacenters could run it)"
    return Never(why)


def shapes(fleet: Iterable[Node]) -> list[Node]:
    """The first node of each shape of ``fleet``, in its order: `never_runs` gives the same answer on these as
    on the whole fleet (it reads no IDs; duplicates change none of its any/max/set answers)."""
    seen: dict[Hashable, Node] = {}
    for node in fleet:
        seen.setdefault(shape_of(node), node)
    return list(seen.values())


def shape_of(node: Node) -> Hashable:
    """``node`` less its identity: its ID and name and its devices' IDs blanked; a device named by another (a MIG
    instance's parent GPU, a topology's place) by the order in which the node first names it instead."""
    ids: dict[str, str] = {}

    def alias(name: str) -> str:
        return ids.setdefault(name, f"#{len(ids)}")

    blank = InstanceId("")
    gpus = tuple(replace(g, id=InstanceId(alias(g.id)), share_ids=(blank,) * len(g.share_ids)) for g in node.gpus)
    migs = tuple(replace(m, id=blank, placement=None if m.placement is None else
                         replace(m.placement, gpu=alias(m.placement.gpu))) for m in node.migs)
    places = None if node.topology is None else tuple((alias(i), p) for i, p in node.topology.places)
    return replace(node, id=NodeId(""), name="", gpus=gpus, migs=migs, topology=None), places


# ---- one node at full size -------------------------------------------------------------------
def _holds(asks: Sequence[AllocAsk], node: Node, *, resources: bool = True) -> bool:
    """Whether an empty ``node`` holds every ask at once (the service pins a job to one node); with
    ``resources`` false, only their GPUs are counted. Each GPU ask lands in the bucket of its
    `room_on` with the most room left (a model for whole GPUs, a model's profile for MIG)."""
    if resources and (sum(a.cpu_mhz for a in asks) > node.cpu_mhz or sum(a.memory_mb for a in asks) > node.memory_mb):
        return False
    used: dict[Hashable, int] = {}
    for ask in asks:
        g = ask.gpu
        if g is None:
            continue
        room = g.room_on(node)
        bucket = max(room, key=lambda b: room[b] - used.get(b, 0), default=None)
        if bucket is None:
            return False
        used[bucket] = used.get(bucket, 0) + g.room_units()
        if used[bucket] > room[bucket]:
            return False
    return True


# ---- the nearest possible ----------------------------------------------------------------------
def _no_scope(job: JobRequest, nodes: list[Node]) -> str:
    pools = ", ".join(sorted({n.node_pool for n in nodes})) or "none"
    dcs = ", ".join(sorted({n.datacenter for n in nodes})) or "none"
    wanted = f"node pool {job.node_pool!r}" if job.node_pool is not None else "any node pool"
    return (f"no node in {wanted} and datacenters {', '.join(sorted(job.datacenters)) or '*'} "
            f"(node pools here: {pools}; datacenters here: {dcs})")


def _nearest(asks: Sequence[AllocAsk], scope: list[Node]) -> str:
    """The first thing that rules the job out, and what the fleet offers instead."""
    for ask in asks:
        if ask.gpu is not None and (why := ask.gpu.never_on(scope)):
            return f"groups[{ask.group}]: {why}"
    cpu, mem = sum(a.cpu_mhz for a in asks), sum(a.memory_mb for a in asks)
    hosts = [n for n in scope if _holds(asks, n, resources=False)]
    if hosts:  # the GPUs are there: CPU or memory beside them is what no node has
        where = " with such GPUs" if any(a.gpu is not None for a in asks) else ""
        need = " and ".join(part for part, short in ((f"{cpu} MHz CPU", cpu > max(n.cpu_mhz for n in hosts)),
                                                      (f"{mem} MB memory", mem > max(n.memory_mb for n in hosts)))
                            if short) or f"{cpu} MHz CPU and {mem} MB memory"
        return (f"{need} on one node; at most {max(n.cpu_mhz for n in hosts)} MHz and "
                f"{max(n.memory_mb for n in hosts)} MB on one node{where} here")
    return f"no one node holds all {len(asks)} of its allocations together (each would fit alone)"
