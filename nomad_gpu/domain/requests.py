"""What a job asks for: per task-group CPU, memory and at most one GPU request, admitted as a gang.

A group with `count = n` becomes n allocation asks; every ask of a job is placed in the same cycle
or none is (gang admission).
"""

from __future__ import annotations

from dataclasses import dataclass

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.units import SLICES_DEFAULT, MigProfile, share_gpu_equivalents

PRIORITY_MIN, PRIORITY_MAX, PRIORITY_DEFAULT = 1, 100, 50


@dataclass(frozen=True)
class WholeGpus:
    """`count` whole GPUs of one model (Nomad fills one request from one device group)."""

    count: int
    models: frozenset[str] = frozenset()
    """Allowed models; empty = any."""
    min_memory_mib: int = 0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise InvalidRequest("gpu.count must be >= 1")
        if self.min_memory_mib < 0:
            raise InvalidRequest("gpu.min_memory_mib must be >= 0")

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def gpu_equivalents(self) -> float:
        return float(self.count)


@dataclass(frozen=True)
class MigSlices:
    """`count` MIG instances of one profile, e.g. `3g.40gb`."""

    profile: str
    count: int = 1
    models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.count < 1:
            raise InvalidRequest("mig.count must be >= 1")
        try:
            parsed = MigProfile.parse(self.profile)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        object.__setattr__(self, "profile", parsed.name)

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def gpu_equivalents(self) -> float:
        return self.count * MigProfile.parse(self.profile).compute_slices / SLICES_DEFAULT


@dataclass(frozen=True)
class GpuShare:
    """A time-slice share of ONE shared GPU, in milli-GPU (1..1000)."""

    milli: int
    models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not 1 <= self.milli <= MILLI_PER_GPU:
            raise InvalidRequest(f"share.milli must be within 1..{MILLI_PER_GPU}, got {self.milli}")

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def gpu_equivalents(self) -> float:
        return share_gpu_equivalents(self.milli)


GpuAsk = WholeGpus | MigSlices | GpuShare


@dataclass(frozen=True)
class AllocAsk:
    """One allocation to place: a task group instance with its resources."""

    group: str
    index: int = 0
    cpu_mhz: int = 0
    memory_mb: int = 0
    gpu: GpuAsk | None = None

    def __post_init__(self) -> None:
        if self.cpu_mhz < 0 or self.memory_mb < 0:
            raise InvalidRequest(f"group {self.group!r}: cpu and memory must be >= 0")

    @property
    def gpu_equivalents(self) -> float:
        return self.gpu.gpu_equivalents if self.gpu is not None else 0.0


@dataclass(frozen=True)
class JobRequest:
    """A queued job as the core sees it: who, how urgent, since when, and what it needs."""

    entry: EntryId
    team: Team
    asks: tuple[AllocAsk, ...]
    priority: int = PRIORITY_DEFAULT
    submitted_at: float = 0.0
    datacenters: frozenset[str] = frozenset()
    """Allowed datacenters; empty = any."""
    node_pool: str | None = None
    one_node: bool = False
    """Every ask on the same node (how the service pins a job today: one node constraint per job)."""
    avoid_nodes: frozenset[NodeId] = frozenset()
    """Nodes this job must not go to for now (Nomad refused its placement there)."""
    drivers: frozenset[str] = frozenset()
    """Task drivers the job's tasks use."""

    def __post_init__(self) -> None:
        if not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise InvalidRequest(f"priority must be within {PRIORITY_MIN}..{PRIORITY_MAX}, got {self.priority}")
        if not self.asks:
            raise InvalidRequest("a job needs at least one task group")

    @property
    def gpu_equivalents(self) -> float:
        return sum(a.gpu_equivalents for a in self.asks)

    def places_on(self, node: Node) -> bool:
        """Whether the node may host the job, as Nomad decides it: a job's datacenters are glob patterns
        where only `*` is special (`scheduler/util.go` readyNodesInDCsAndPool, ryanuber/go-glob, v2.0.5); no
        datacenters at all means any. A job without a pool may go to any pool here: the service renders the
        chosen node's pool into the job, so Nomad scans that pool. Every driver the job's tasks use must be
        detected and healthy on the node (`scheduler/feasible/feasible.go` DriverChecker, v2.0.5)."""
        if self.node_pool is not None and node.node_pool != self.node_pool:
            return False
        if node.id in self.avoid_nodes:
            return False
        if self.drivers and node.drivers is not None and not self.drivers <= node.drivers:
            return False
        if not self.datacenters or node.datacenter in self.datacenters:
            return True
        return any("*" in p and _glob(p, node.datacenter) for p in self.datacenters)


def _glob(pattern: str, value: str) -> bool:
    """go-glob semantics: `*` matches any run of characters, everything else is literal."""
    parts = pattern.split("*")
    if not value.startswith(parts[0]) or not value.endswith(parts[-1]) or len(value) < len(parts[0]) + len(parts[-1]):
        return False
    pos, end = len(parts[0]), len(value) - len(parts[-1])
    for part in parts[1:-1]:
        found = value.find(part, pos, end)
        if found < 0:
            return False
        pos = found + len(part)
    return True
