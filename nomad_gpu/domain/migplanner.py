"""Queue-driven MIG re-layouts: which idle instances of which GPU to destroy, and what to create instead.

MIG capacity fragments: a waiting 3g ask cannot run while the free capacity lies in idle 1g instances
that sit on the slices a 3g needs. Nomad places only onto instances that exist, so the remedy is a
re-layout of one GPU: destroy idle instances, create the ones the queue waits for. This module decides
that, purely, from data the service gathers (DESIGN decision 15):

- only idle instances are destroyed; busy ones (any allocation, ours or foreign) stay where they are;
- every layout it proposes is valid for the GPU's profile table (`miglayout.check_layout`);
- a re-layout must admit at least one waiting ask that no existing idle instance can serve;
- the asks are served in the order given (the cycle's: priority, fair share, wait): a plan that admits
  an earlier ask beats any plan that admits only later ones;
- at most one re-layout per node, none on a node with one in flight or on a GPU re-laid within the
  cool-down interval;
- slices no admitted ask uses keep their idle instances where possible, and empty slices are filled
  with the GPU's default profiles so that the capacity stays visible to Nomad.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.kinds.mig import MIG
from nomad_gpu.domain.miglayout import MigGeometry, Placed, arrangements, check_layout, fill, format_layout
from nomad_gpu.domain.requests import JobRequest


@dataclass(frozen=True)
class MigInstance:
    """An instance that exists now, where it sits, and whether anything runs on it (or holds it)."""

    id: str
    placed: Placed
    busy: bool


@dataclass(frozen=True)
class MigGpu:
    """One MIG-mode GPU of a node, as the planner sees it."""

    node: NodeId
    uuid: str
    model: str
    geometry: MigGeometry
    instances: tuple[MigInstance, ...]
    opted_in: bool = True
    """The operator allowed re-layouts here (node meta or service config)."""
    last_relayout_at: float | None = None


@dataclass(frozen=True)
class MigAsk:
    """A waiting ask for `count` instances of `profile` on one node, in the cycle's order."""

    key: str
    profile: str
    count: int = 1
    models: frozenset[str] = frozenset()
    nodes: frozenset[NodeId] | None = None
    """The nodes with the job's CPU and memory free and in its scope (pool, datacenters, drivers); None
    = any. An idle instance elsewhere serves no one, and a re-layout elsewhere would not either."""

    def allows(self, gpu: MigGpu) -> bool:
        return ((not self.models or gpu.model in self.models) and (self.nodes is None or gpu.node in self.nodes)
                and gpu.geometry.shape(self.profile) is not None)


@dataclass(frozen=True)
class PlanSettings:
    cool_down_s: float = 600.0
    """A GPU is not re-laid again within this many seconds of its last re-layout (hysteresis)."""
    default_profiles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per geometry family, the profiles that fill unused slices; the family's 1g when not given."""


@dataclass(frozen=True)
class Relayout:
    """One GPU's change: the whole target layout, and what it takes to get there."""

    node: NodeId
    gpu: str
    before: tuple[Placed, ...]
    after: tuple[Placed, ...]
    destroy: tuple[str, ...]
    """Instance IDs to destroy; every one idle when planned (the apply job's `--expect-idle`)."""
    create: tuple[Placed, ...]
    admits: tuple[str, ...]
    """Keys of the asks the new instances are for, in queue order."""

    @property
    def layout(self) -> str:
        """The apply command's `--layout` argument: the whole target, `profile@start` items."""
        return format_layout(self.after)


def plan(gpus: Sequence[MigGpu], asks: Sequence[MigAsk], *, now: float,
         settings: PlanSettings = PlanSettings(), busy_nodes: Iterable[NodeId] = ()) -> tuple[Relayout, ...]:
    """The re-layouts to start now: at most one per node, each admitting asks nothing else admits."""
    claimed = _claim_idle(gpus, asks)
    waiting = [a for a in asks if a.key not in claimed]
    busy = set(busy_nodes)
    by_node: dict[NodeId, list[MigGpu]] = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    taken = {i for ids in claimed.values() for i in ids}
    out: list[Relayout] = []
    while waiting:
        best: tuple[tuple[tuple[bool, ...], int], Relayout] | None = None
        for node, node_gpus in sorted(by_node.items()):
            if node in busy:
                continue
            for gpu in node_gpus:
                if not _may_relay(gpu, now, settings):
                    continue
                candidate = _plan_gpu(gpu, node_gpus, waiting, taken, settings)
                if candidate is None:
                    continue
                admitted = set(candidate.admits)
                rank = (tuple(a.key in admitted for a in waiting), -len(candidate.destroy))
                if best is None or rank > best[0]:
                    best = (rank, candidate)
        if best is None:
            break
        chosen = best[1]
        out.append(chosen)
        busy.add(chosen.node)
        waiting = [a for a in waiting if a.key not in chosen.admits]
    return tuple(out)


def _may_relay(gpu: MigGpu, now: float, settings: PlanSettings) -> bool:
    if not gpu.opted_in:
        return False
    return gpu.last_relayout_at is None or now - gpu.last_relayout_at >= settings.cool_down_s


def _claim_idle(gpus: Sequence[MigGpu], asks: Sequence[MigAsk]) -> dict[str, tuple[str, ...]]:
    """Asks that idle instances can serve as things stand (any node, opted in or not), with the
    instances they take, in queue order: no re-layout is made for them, and their instances stay."""
    free: dict[NodeId, list[tuple[MigGpu, MigInstance]]] = {}
    for gpu in gpus:
        free.setdefault(gpu.node, []).extend((gpu, i) for i in gpu.instances if not i.busy)
    claimed: dict[str, tuple[str, ...]] = {}
    for ask in asks:
        for node in sorted(free):
            fits = [(g, i) for g, i in free[node] if i.placed.profile == ask.profile and ask.allows(g)]
            if len(fits) >= ask.count:
                use = fits[:ask.count]
                claimed[ask.key] = tuple(i.id for _, i in use)
                free[node] = [pair for pair in free[node] if pair not in use]
                break
    return claimed


def _plan_gpu(gpu: MigGpu, node_gpus: Sequence[MigGpu], waiting: Sequence[MigAsk], taken: set[str],
              settings: PlanSettings) -> Relayout | None:
    """The best re-layout of one GPU for the waiting asks, or None when it admits none of them."""
    geometry = gpu.geometry
    fixed = [i.placed for i in gpu.instances if i.busy or i.id in taken]
    idle = [i for i in gpu.instances if not i.busy and i.id not in taken]
    # Idle instances on the node's other GPUs still help an ask for several instances.
    elsewhere: Counter[str] = Counter(
        i.placed.profile for g in node_gpus if g.uuid != gpu.uuid
        for i in g.instances if not i.busy and i.id not in taken)
    wanted: list[str] = []
    admits: list[str] = []
    for ask in waiting:
        if not ask.allows(gpu):
            continue
        from_elsewhere = min(elsewhere[ask.profile], ask.count - 1)
        trial = wanted + [ask.profile] * (ask.count - from_elsewhere)
        if next(arrangements(geometry, trial, fixed), None) is not None:
            wanted = trial
            admits.append(ask.key)
            elsewhere[ask.profile] -= from_elsewhere
    if not admits:
        return None
    # Among the placements for what is wanted, destroy the fewest idle instances.
    best = min(arrangements(geometry, wanted, fixed),
               key=lambda arr: (sum(1 for i in idle if any(i.placed.overlaps(p) for p in arr)), arr))
    kept = [i for i in idle if not any(i.placed.overlaps(p) for p in best)]
    defaults = settings.default_profiles.get(geometry.family) or (geometry.smallest.name,)
    after = fill(geometry, [*fixed, *best, *(i.placed for i in kept)], defaults)
    assert check_layout(geometry, after) is None, after  # arrangements and fill keep layouts valid
    before = tuple(sorted(i.placed for i in gpu.instances))
    keep = set(fixed) | {i.placed for i in kept}
    create = tuple(p for p in after if p not in keep)
    if not create:  # what is wanted sits on idle instances already: the cycle admits it, no re-layout
        return None
    kept_ids = {i.id for i in kept}
    destroy = tuple(i.id for i in idle if i.id not in kept_ids)
    return Relayout(gpu.node, gpu.uuid, before, after, destroy, create, tuple(admits))


def waiting_mig_asks(waiting: Sequence[JobRequest], frees: Iterable[NodeFree] | None = None) -> list[MigAsk]:
    """The MIG asks of jobs the cycle left waiting, in the order given (the cycle's): an explicit `mig:`
    ask, or a MIG alternative of a tiered ask (a serving class's MIG tier). One ask per job: a job of
    several groups needs several GPUs re-laid, which one re-layout per node cannot promise. Given what
    each node has free now (`frees`), each ask names the MIG nodes that could host it beside its GPU."""
    hosts = [nf for nf in frees if nf.node.migs and nf.offered] if frees is not None else None
    out: list[MigAsk] = []
    for request in waiting:
        if len(request.asks) != 1:
            continue
        (ask,) = request.asks
        for option in ask.alternatives():
            gpu = MIG.ask_of(option.gpu)
            if gpu is not None:
                nodes = None if hosts is None else frozenset(
                    nf.id for nf in hosts if nf.cpu_free >= ask.cpu_mhz and nf.mem_free >= ask.memory_mb
                    and request.places_on(nf.node))
                out.append(MigAsk(str(request.entry), gpu.profile, gpu.count, gpu.models, nodes))
                break
    return out
