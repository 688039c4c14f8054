"""Why a job does not fit: the checks a node must pass before it is scored, each miss counted, and the
count turned into one ranked wait reason once the search is over.

It exists apart from the fitter because the fitter's question is "where", this module's is "why not":
the checks (`passes`) count what they turn away in a `Scan`, and `why_not` judges that count against
the index's static shapes, the free totals and the job's own limits, so "why is my job waiting?" is
answered from the decision itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from nomad_gpu.domain.freeindex import FreeIndex, NodeFree
from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.placement import NoFit, WaitReason
from nomad_gpu.domain.policies import options
from nomad_gpu.domain.requests import AllocAsk, JobRequest


@dataclass
class Scan:
    """What a failed search saw, to say why."""

    blocked: int = 0
    short_of_resources: int = 0
    elsewhere: int = 0
    """Nodes outside the job's datacenters or node pool."""


def passes(job: JobRequest, ask: AllocAsk, nf: NodeFree, blocked: frozenset[NodeId], scan: Scan) -> bool:
    """Whether `nf` passes the checks before scoring (schedulable, the job's datacenters and node pool,
    not held for an older job, CPU and memory beside the GPUs); a miss is counted in `scan`."""
    node = nf.node
    if not node.schedulable:  # `nf.offered`, without the property's call on the hot path
        return False
    if not job.places_on(node):
        scan.elsewhere += 1
        return False
    if node.id in blocked:
        scan.blocked += 1
        return False
    if nf.cpu_free < ask.cpu_mhz or nf.mem_free < ask.memory_mb:
        if ask.gpu is None or next(options(nf, ask), None) is not None:
            scan.short_of_resources += 1
        return False
    return True


def shape(index: FreeIndex, ask: AllocAsk) -> tuple[str, int, list[str]]:
    """The index's view of the ask: its kind, the value it needs, the names that can serve it."""
    g = ask.gpu
    if g is None:
        return "none", 0, []
    kind = g.kind.name
    return kind, g.need(), [n for n in index.names(kind) if g.allows_name(n)]


def why_not(index: FreeIndex, ask: AllocAsk, scan: Scan, staged: bool) -> NoFit:
    """The reason `ask` found no node, from what the search saw; `staged`: the job's other groups
    already took part of the free capacity."""
    if ask.gpu is None:
        return NoFit(WaitReason.CPU_MEMORY, f"no node has {ask.cpu_mhz} MHz and {ask.memory_mb} MB free")
    kind, need, names = shape(index, ask)
    what = _describe(ask)
    static = [n for n in index.static_names(kind) if _allowed(ask, kind, n)]
    largest_static = max((index.static_largest(kind, n) for n in static), default=0)
    if largest_static < need:
        return NoFit(WaitReason.NO_SUCH_SHAPE, f"no schedulable node has {what}")
    if scan.short_of_resources:
        return NoFit(WaitReason.CPU_MEMORY,
                     f"{scan.short_of_resources} node(s) have {what} free but not {ask.cpu_mhz} MHz "
                     f"and {ask.memory_mb} MB beside it")
    if scan.blocked:
        return NoFit(WaitReason.RESERVED, f"{scan.blocked} node(s) with {what} free are held for an older job")
    total = sum(index.total(kind, n) for n in names)
    largest = max((index.largest(kind, n) for n in names), default=0)
    return ask.gpu.kind.shortfall(what, need, total, largest, _limits(ask, scan, staged))


def _limits(ask: AllocAsk, scan: Scan, staged: bool) -> str:
    """The job's own limits that can keep free capacity out of its reach."""
    limits = []
    if scan.elsewhere:
        limits.append(f"{scan.elsewhere} node(s) are outside its datacenters or node pool")
    if ask.gpu is not None:
        limits += ask.gpu.limits()
    if staged:
        limits.append("its other groups already take part of the free capacity")
    return f" ({'; '.join(limits)})" if limits else ""


def _allowed(ask: AllocAsk, kind: str, name: str) -> bool:
    g = ask.gpu
    return g is not None and g.kind.name == kind and g.allows_name(name)


def _describe(ask: AllocAsk) -> str:
    return ask.gpu.describe() if ask.gpu is not None else "capacity"
