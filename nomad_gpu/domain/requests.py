"""What a job asks for: per task-group CPU, memory and at most one GPU request, admitted as a gang.

A group with `count = n` becomes n allocation asks; every ask of a job is placed in the same cycle
or none is (gang admission). The GPU request is of one kind (`domain.kinds`), or, for an ask with
alternatives, tiers of them: the first tier with any feasible option wins, and within a tier the
policy's score chooses the alternative and the node as it chooses nodes for everything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.kinds import GpuAsk, GpuShare, MigSlices, WholeGpus

__all__ = ["PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN", "AllocAsk", "GpuAsk", "GpuShare", "JobRequest",
           "MigSlices", "Tier", "WholeGpus"]

PRIORITY_MIN, PRIORITY_MAX, PRIORITY_DEFAULT = 1, 100, 50




Tier = tuple[GpuAsk, ...]
"""Alternatives of equal standing: the policy's score chooses among them."""


@dataclass(frozen=True)
class AllocAsk:
    """One allocation to place: a task group instance with its resources."""

    group: str
    index: int = 0
    cpu_mhz: int = 0
    memory_mb: int = 0
    gpu: GpuAsk | None = None
    """The GPU request; for an ask with `tiers`, their first alternative (what the typical-demand
    measure counts the ask as)."""
    tiers: tuple[Tier, ...] = ()
    """Alternatives in order of preference; empty: `gpu` is the one option (today's asks)."""

    def __post_init__(self) -> None:
        if self.cpu_mhz < 0 or self.memory_mb < 0:
            raise InvalidRequest(f"group {self.group!r}: cpu and memory must be >= 0")
        if self.tiers:
            if any(not tier for tier in self.tiers):
                raise InvalidRequest(f"group {self.group!r}: a tier needs at least one alternative")
            if self.gpu is None:
                object.__setattr__(self, "gpu", self.tiers[0][0])
            elif self.gpu != self.tiers[0][0]:
                raise InvalidRequest(f"group {self.group!r}: gpu must be the first alternative of the first tier")

    @property
    def gpu_equivalents(self) -> float:
        """What the ask counts for in quotas: its cheapest alternative (the one option, usually)."""
        if self.tiers:
            return min(alt.gpu_equivalents for tier in self.tiers for alt in tier)
        return self.gpu.gpu_equivalents if self.gpu is not None else 0.0

    def alternatives(self) -> tuple[AllocAsk, ...]:
        """The ask once per alternative, in tier order, each with one option (itself for a plain ask)."""
        if not self.tiers:
            return (self,)
        return tuple(self.one_option(alt) for tier in self.tiers for alt in tier)

    def one_option(self, gpu: GpuAsk) -> AllocAsk:
        """This ask with `gpu` as its one option."""
        return AllocAsk(self.group, self.index, self.cpu_mhz, self.memory_mb, gpu)


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
    """The one Nomad pool it runs in (`all`: every node); None: any (the simulator's jobs; the service always
    names one, since a job without a pool is Nomad's `default`, never free to go anywhere)."""
    one_node: bool = False
    """Every ask on the same node (how the service pins a job today: one node constraint per job)."""
    avoid_nodes: frozenset[NodeId] = frozenset()
    """Nodes this job must not go to for now (Nomad refused its placement there)."""
    drivers: frozenset[str] = frozenset()
    """Task drivers the job's tasks use."""
    preemptible: bool = False
    """Whether its attempts may be stopped to make room (then it may also run on a cohort's lent quota)."""
    tiered: bool = field(default=False, init=False, repr=False, compare=False)
    """Whether any ask offers alternatives (set from `asks`; the cycle reads it on every decision)."""

    def __post_init__(self) -> None:
        if not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise InvalidRequest(f"priority must be within {PRIORITY_MIN}..{PRIORITY_MAX}, got {self.priority}")
        if not self.asks:
            raise InvalidRequest("a job needs at least one task group")
        object.__setattr__(self, "tiered", any(a.tiers for a in self.asks))

    @property
    def gpu_equivalents(self) -> float:
        return sum(a.gpu_equivalents for a in self.asks)

    def places_on(self, node: Node) -> bool:
        """Whether the node may host the job, as Nomad decides it: a job's datacenters are glob patterns
        where only `*` is special (`scheduler/util.go` readyNodesInDCsAndPool, ryanuber/go-glob, v2.0.5); no
        datacenters at all means any. The job's one pool is scanned, every node for `all` (the same function).
        Every driver the job's tasks use must be detected and healthy on the node
        (`scheduler/feasible/feasible.go` DriverChecker, v2.0.5)."""
        if self.node_pool not in (None, "all", node.node_pool):  # `all` scans every node (scheduler/util.go)
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
