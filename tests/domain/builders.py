"""Small builders for clusters, jobs and cycles, so that every test table reads as data.

Instance IDs are readable (`GPU-n1-0`, `MIG-n1-3g-0`): the core treats them as opaque strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nomad_gpu.domain.cycle import Admit, CycleConfig, CycleResult, Wait, run_cycle
from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy, UsageHistory
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, MigSlice, Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.requests import AllocAsk, GpuAsk, GpuShare, JobRequest, MigSlices, WholeGpus
from nomad_gpu.domain.units import MigProfile

A100 = "NVIDIA A100-SXM4-80GB"
A800 = "NVIDIA A800-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
L40S = "NVIDIA L40S"

CPU = 64_000
MEM = 512_000


def whole_gpus(node: str, n: int, model: str = A100, *, start: int = 0, memory_mib: int = 81_920,
               unhealthy: Iterable[int] = ()) -> tuple[Gpu, ...]:
    bad = set(unhealthy)
    return tuple(Gpu(InstanceId(f"GPU-{node}-{k}"), model, memory_mib, healthy=k not in bad)
                 for k in range(start, start + n))


def shared_gpus(node: str, n: int, model: str = A100, *, slots: int | None = None, start: int = 0,
                mode: GpuMode = GpuMode.SHARED) -> tuple[Gpu, ...]:
    return tuple(Gpu(InstanceId(f"GPU-{node}-s{k}"), model, 81_920, mode=mode, max_tenants=slots)
                 for k in range(start, start + n))


def plugin_shared_gpus(node: str, n: int, slots: int, model: str = A100, *, start: int = 0) -> tuple[Gpu, ...]:
    """Shared GPUs as the device plugin advertises them: N share instances `<gpu>-share-<k>` each."""
    return tuple(Gpu(InstanceId(f"GPU-{node}-s{k}"), model, 81_920, mode=GpuMode.SHARED, max_tenants=slots,
                     share_ids=tuple(InstanceId(f"GPU-{node}-s{k}-share-{j}") for j in range(slots)),
                     share_device=model)
                 for k in range(start, start + n))


def mig_slices(node: str, profile: str, n: int, model: str = H100, *, start: int = 0,
               unhealthy: Iterable[int] = ()) -> tuple[MigSlice, ...]:
    bad = set(unhealthy)
    parsed = MigProfile.parse(profile)
    tag = profile.split(".")[0]
    return tuple(MigSlice(InstanceId(f"MIG-{node}-{tag}-{k}"), model, parsed, parsed.memory_gb * 1024,
                          healthy=k not in bad)
                 for k in range(start, start + n))


def make_node(name: str, *, gpus: Sequence[Gpu] = (), migs: Sequence[MigSlice] = (), cpu: int = CPU,
              mem: int = MEM, **kw: object) -> Node:
    return Node(NodeId(name), name=name, cpu_mhz=cpu, memory_mb=mem, gpus=tuple(gpus), migs=tuple(migs),
                **kw)  # type: ignore[arg-type]


def gpu_node(name: str, n: int = 8, model: str = A100, **kw: object) -> Node:
    return make_node(name, gpus=whole_gpus(name, n, model), **kw)  # type: ignore[arg-type]


def ledger_of(*nodes: Node) -> Ledger:
    return Ledger(Inventory.of(nodes))


def whole(count: int = 1, *models: str, min_memory_mib: int = 0) -> WholeGpus:
    return WholeGpus(count, frozenset(models), min_memory_mib)


def mig(profile: str, count: int = 1, *models: str) -> MigSlices:
    return MigSlices(profile, count, frozenset(models))


def share(milli: int, *models: str) -> GpuShare:
    return GpuShare(milli, frozenset(models))


def job(entry: str, gpu: GpuAsk | None = None, *, team: str = "a", priority: int = 50, at: float = 0.0,
        cpu: int = 0, mem: int = 0, groups: int = 1, one_node: bool = False,
        datacenters: Iterable[str] = (), node_pool: str | None = None) -> JobRequest:
    asks = tuple(AllocAsk(f"g{k}", 0, cpu, mem, gpu) for k in range(groups))
    return JobRequest(EntryId(entry), Team(team), asks, priority, at, frozenset(datacenters), node_pool, one_node)


def gang(entry: str, *asks: AllocAsk, team: str = "a", at: float = 0.0, one_node: bool = False) -> JobRequest:
    return JobRequest(EntryId(entry), Team(team), tuple(asks), submitted_at=at, one_node=one_node)


def ask(group: str, gpu: GpuAsk | None = None, *, cpu: int = 0, mem: int = 0, index: int = 0) -> AllocAsk:
    return AllocAsk(group, index, cpu, mem, gpu)


def config(policy: str = "frag-aware", *, quotas: dict[str, float] | None = None,
           weights: dict[str, float] | None = None, hol: float = 600.0, half_life: float = 3600.0,
           max_holds: int = 1) -> CycleConfig:
    teams: dict[Team, TeamPolicy] = {}
    for name in set(quotas or {}) | set(weights or {}):
        teams[Team(name)] = TeamPolicy((weights or {}).get(name, 1.0), (quotas or {}).get(name))
    return CycleConfig(policy=policy, hol_threshold_s=hol, max_holds=max_holds,
                       fair=FairShareConfig(half_life_s=half_life, teams=teams))


def cycle(ledger: Ledger, queue: Sequence[JobRequest], *, now: float = 0.0, policy: str = "frag-aware",
          cfg: CycleConfig | None = None, usage: UsageHistory | None = None,
          holds: dict[EntryId, frozenset[NodeId]] | None = None) -> CycleResult:
    return run_cycle(ledger, queue, now=now, config=cfg or config(policy), usage=usage or UsageHistory(),
                     holds=holds)


def decision(result: CycleResult, entry: str) -> Admit | Wait:
    (found,) = [d for d in result.decisions if d.entry == entry]
    return found


def admitted(result: CycleResult, entry: str) -> Admit:
    d = decision(result, entry)
    assert isinstance(d, Admit), f"{entry} was not admitted: {d}"
    return d


def waiting(result: CycleResult, entry: str) -> Wait:
    d = decision(result, entry)
    assert isinstance(d, Wait), f"{entry} was admitted: {d}"
    return d


def nodes_of(decision: Admit) -> set[NodeId]:
    return {p.node for p in decision.placements}


def occupy(ledger: Ledger, entry: str, node: str, gpus: int = 0, *, cpu: int = 0, mem: int = 0,
           team: str = "busy") -> None:
    """Hold `gpus` whole GPUs (the node's first free ones) plus CPU/memory under `entry`."""
    nf = ledger.node_free(NodeId(node))
    assert nf is not None
    free = [gid for ids in nf.whole_free().values() for gid in ids][:gpus]
    assert len(free) == gpus, f"{node} has only {len(free)} whole GPUs free"
    model = nf.gpus[free[0]].model if free else None
    ledger.reserve(EntryId(entry), Team(team), [AllocPlacement("g", 0, NodeId(node), cpu, mem, tuple(free), model,
                                                               gpu_equivalents=float(gpus))])


def free_whole(ledger: Ledger, node: str) -> int:
    nf = ledger.node_free(NodeId(node))
    assert nf is not None
    return sum(len(ids) for ids in nf.whole_free().values())
