"""Could this job ever run on this fleet? The check behind refusing what can only wait forever.

A job that asks for 9 GPUs on a fleet of 8-GPU nodes, for a model or a MIG profile no node has, or for
more memory than any node holds, is not waiting for capacity: nothing that frees up will ever admit it.
Slurm refuses such a job at `sbatch`; we refuse it at submission, with the nearest thing the fleet does
offer, and an entry that becomes such a job later (its nodes were removed) says so in its wait reason.

"The fleet" is every node Nomad lists, down, ineligible and draining ones too (they may come back), at
its full size, not what is free now; only the job's node pool and datacenters narrow it. A MIG-mode GPU
counts with every profile its model supports (a re-layout can make any of them, DESIGN 15; the tables
are `miglayout.py`'s). Pure: the caller passes the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice, product

from nomad_gpu.domain.ids import MILLI_PER_GPU
from nomad_gpu.domain.inventory import GpuMode, Node
from nomad_gpu.domain.miglayout import geometry_for
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile


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


# ---- one node at full size -------------------------------------------------------------------
def _holds(asks: Sequence[AllocAsk], node: Node, *, resources: bool = True) -> bool:
    """Whether an empty ``node`` holds every ask at once (the service pins a job to one node); with
    ``resources`` false, only their GPUs are counted."""
    if resources and (sum(a.cpu_mhz for a in asks) > node.cpu_mhz or sum(a.memory_mb for a in asks) > node.memory_mb):
        return False
    whole: dict[str, int] = {}
    mig: dict[tuple[str, str], int] = {}
    shares = 0
    for ask in asks:
        g = ask.gpu
        if isinstance(g, WholeGpus):
            counts = _whole_by_model(g, node)
            model = max(counts, key=lambda m: counts[m] - whole.get(m, 0), default=None)
            if model is None:
                return False
            whole[model] = whole.get(model, 0) + g.count
            if whole[model] > counts[model]:
                return False
        elif isinstance(g, MigSlices):
            room = _mig_room(g, node)
            model = max(room, key=lambda m: room[m] - mig.get((m, g.profile), 0), default=None)
            if model is None:
                return False
            mig[(model, g.profile)] = mig.get((model, g.profile), 0) + g.count
            if mig[(model, g.profile)] > room[model]:
                return False
        elif isinstance(g, GpuShare):
            shares += g.milli
            if shares > MILLI_PER_GPU * len(_shared(g, node)):
                return False
    return True


def _whole_by_model(g: WholeGpus, node: Node) -> dict[str, int]:
    counts: dict[str, int] = {}
    for gpu in node.gpus:
        if gpu.mode is not GpuMode.SHARED and g.allows(gpu.model) and gpu.memory_mib >= g.min_memory_mib:
            counts[gpu.model] = counts.get(gpu.model, 0) + 1
    return counts


def _mig_parents(node: Node) -> dict[str, int]:
    """MIG-mode GPUs per model: the distinct parents of the node's instances (by PCI bus ID when the
    fingerprint says it, else the fewest 7-slice GPUs their compute slices need)."""
    buses: dict[str, set[str]] = {}
    slices: dict[str, int] = {}
    for m in node.migs:
        if m.pci_bus_id:
            buses.setdefault(m.model, set()).add(m.pci_bus_id)
        slices[m.model] = slices.get(m.model, 0) + m.profile.compute_slices
    return {model: len(buses.get(model, ())) or -(-used // 7) for model, used in slices.items()}


def profiles_of(model: str, node: Node) -> dict[str, int]:
    """Profile -> the most instances of it one GPU holds, for a MIG-mode model of ``node``: its MIG geometry
    (`miglayout.py`, the MIG user guide's tables), found from the model and the instances it reports; where
    no table fits, only the profiles it reports, as many as their compute slices allow on 7."""
    seen = [(m.profile.name, None) for m in node.migs if m.model == model]
    geometry = geometry_for(model, seen)
    if geometry is not None:
        return {shape.name: shape.max_count for shape in geometry.shapes}
    return {name: 1 if "+" in name else max(7 // max(MigProfile.parse(name).compute_slices, 1), 1)
            for name, _ in seen}


def _mig_room(g: MigSlices, node: Node) -> dict[str, int]:
    """Instances of the profile a node could offer per model: those reported now, or a re-layout's most."""
    room: dict[str, int] = {}
    for m in node.migs:
        if m.profile.name == g.profile and g.allows(m.model):
            room[m.model] = room.get(m.model, 0) + 1
    for model, parents in _mig_parents(node).items():
        if g.allows(model):
            most = parents * profiles_of(model, node).get(g.profile, 0)
            if most > room.get(model, 0):
                room[model] = most
    return {model: n for model, n in room.items() if n > 0}


def _shared(g: GpuShare, node: Node) -> list[str]:
    return [gpu.id for gpu in node.gpus if gpu.mode.takes_shares and g.allows(gpu.model)]


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
        g, where = ask.gpu, f"group {ask.group!r}"
        if isinstance(g, WholeGpus):
            if why := _whole_nearest(g, scope):
                return f"{where}: {why}"
        elif isinstance(g, MigSlices):
            if why := _mig_nearest(g, scope):
                return f"{where}: {why}"
        elif isinstance(g, GpuShare) and not any(_shared(g, n) for n in scope):
            return f"{where}: a time-slice share needs a shared GPU; none here is shared"
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


def _whole_nearest(g: WholeGpus, scope: list[Node]) -> str | None:
    models = sorted({gpu.model for n in scope for gpu in n.gpus if gpu.mode is not GpuMode.SHARED})
    if not models:
        return "whole GPUs asked for; no node here has a GPU that is not shared"
    if g.models and not any(g.allows(m) for m in models):
        return f"no GPU of model {', '.join(sorted(g.models))}; models here: {', '.join(models)}"
    if g.min_memory_mib:
        largest = max((gpu.memory_mib for n in scope for gpu in n.gpus if g.allows(gpu.model)), default=0)
        if largest < g.min_memory_mib:
            return f"GPUs of {g.min_memory_mib} MiB asked for; at most {largest} MiB per GPU here"
    most = max((max(_whole_by_model(g, n).values(), default=0) for n in scope), default=0)
    if most < g.count:
        return f"{g.count} GPUs of one model on one node asked for; at most {most} on one node here"
    return None


def _mig_nearest(g: MigSlices, scope: list[Node]) -> str | None:
    offered: set[str] = {m.profile.name for n in scope for m in n.migs}
    for n in scope:
        for model in _mig_parents(n):
            offered |= set(profiles_of(model, n))
    if not offered:
        return f"MIG {g.profile} asked for; no GPU here is in MIG mode"
    most = max((max(_mig_room(g, n).values(), default=0) for n in scope), default=0)
    if most == 0:
        return f"no MIG profile {g.profile}; MIG profiles here: {', '.join(sorted(offered, key=_profile_key))}"
    if most < g.count:
        return f"{g.count} x MIG {g.profile} on one node asked for; at most {most} on one node here"
    return None


def _profile_key(name: str) -> tuple[int, int, str]:
    g, _, rest = name.partition("g.")
    mem = rest.split("gb", 1)[0]
    return (int(g) if g.isdigit() else 99, int(mem) if mem.isdigit() else 0, name)
