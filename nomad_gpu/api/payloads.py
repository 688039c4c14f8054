"""The HTTP API's JSON shapes, as typed values both sides import: the service builds them and sends
``to_json()``, the CLI and the demo read them back with ``from_json()``, and the OpenAPI document's
schemas are generated from them (`nomad_gpu.service.http.openapi`).

Field names are the wire's and are a stable interface: add fields, never rename or remove one. A new
field gets a default, so a reader of this release can read an older service's answers. A field typed
``... | Unset`` is left out of some answers (``eta`` unless it was asked for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from nomad_gpu.api.codec import UNSET, Payload, Unset, doc, read
from nomad_gpu.api.reports import (
    History,
    Minute,
    Status,
    SweepRow,
    Sweeps,
    TeamRow,
    Teams,
    UsageReport,
    UsageRow,
    Whoami,
)

__all__ = [
    "UNSET", "Allocation", "Allocations", "Entries", "Entry", "ErrorReply", "GpuView", "Hcl", "History", "Holder",
    "Inventory", "MigGpu", "MigRelayoutView", "MigView", "Minute", "NodeView", "Patch", "Payload", "Placement",
    "Status", "Sweep", "SweepRow", "Sweeps", "TeamRow", "Teams", "Unset", "Usage", "UsageReport", "UsageRow", "Whoami",
    "read",
]

@dataclass(frozen=True)
class ErrorReply(Payload):
    """Every refusal: a 4xx or 5xx status with one line."""

    SCHEMA_NAME: ClassVar[str] = "Error"
    error: str = doc("One line saying what was refused and why.", default="")
    errors: tuple[str, ...] = doc("Every located message, one each (a spec with three mistakes has three); "
                                  "`error` is them joined by \"; \".", default=())


@dataclass(frozen=True)
class Patch(Payload):
    """The fields of an entry a caller may change."""

    priority: int = field(default=50, metadata={"schema": {"minimum": 1, "maximum": 100}})


@dataclass(frozen=True)
class Kept(Payload):
    """A keep's answer: until when the job is not taken back for being idle."""

    id: str = ""
    kept_until: float = doc("Unix seconds", default=0.0)


# ---- entries ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement(Payload):
    """Where one member of a task group runs: its node, CPU, memory and the device instances pinned."""

    group: str = ""
    index: int = 0
    node: str = doc("Nomad node ID.", default="")
    cpu_mhz: int = 0
    memory_mb: int = 0
    instance_ids: tuple[str, ...] = doc("GPU-..., MIG-... or share instance IDs.", default=())
    device_name: str | None = None
    share_milli: int = 0
    gpu_equivalents: float = 0.0
    share_gpu: str | None = doc("The GPU a time-slice share is on.", default=None)
    link: str | None = doc("How the GPUs of a multi-GPU placement reach each other: `NVLink`, `PCIe, one switch`, "
                           "`PCIe, one NUMA node`, `PCIe across NUMA nodes`, or `topology unknown` where the node's "
                           "device plugin publishes no topology (`PCIe` before); null for one GPU.", default=None)
    choice: str | None = doc("For a group whose workload class chose the kind: what was chosen and why, e.g. "
                             "`serving -> MIG 3g.40gb on h100-mig-1: needs 14 GiB; isolated; tier 1`; null "
                             "otherwise.", default=None)


@dataclass(frozen=True)
class Usage(Payload):
    """GPU utilisation and memory of a running entry's devices, from Nomad's allocation stats."""

    gpu_util_pct: float | None = None
    gpu_memory_used_mib: float | None = None
    gpu_memory_total_mib: float | None = None
    idle: bool = False
    idle_gpus: int = 0
    idle_since: float | None = None
    sampled_at: float = 0.0
    idle_for_s: float | None = doc("Seconds every device it holds has been idle, where its class has an idle "
                                   "policy (null: not idle, or no policy).", default=None)
    idle_warned: bool = doc("Idle past its class's warning window.", default=False)
    idle_note: str = doc("Once warned, its idle clock in words: `idle 25 min: will be stopped in 5 min if a job "
                         "is waiting`.", default="")
    reclaim_in_s: float | None = doc("Seconds until its class's idle action is due (0: due, done when a job "
                                     "waits; null: its class only warns).", default=None)
    kept_until: float | None = doc("Unix seconds until which `keep` postpones its reclaim (null: not kept).",
                                   default=None)


@dataclass(frozen=True)
class Entry(Payload):
    """One queue entry: a submitted job or one trial of a sweep."""

    id: str = ""
    name: str = ""
    team: str = ""
    priority: int = 0
    state: str = doc("Where the entry is in its life: queued, admitted, running or how it ended.", default="")
    submitted_at: float = doc("Unix seconds", default=0.0)
    attempts: int = 0
    max_retries: int = 0
    reason: str = doc("Why it waits, or how it ended.", default="")
    nomad_job_id: str = ""
    placements: tuple[Placement, ...] = ()
    admitted_at: float | None = doc("Unix seconds", default=None)
    finished_at: float | None = doc("Unix seconds", default=None)
    sweep: str | None = None
    spec: dict[str, Any] = doc("The validated job spec.", default_factory=dict)
    namespace: str = "default"
    registered_at: float | None = doc("Unix seconds", default=None)
    refusals: int = 0
    held: bool = False
    usage: Usage | None | Unset = doc("GPU utilisation and memory of a running entry (null while unknown).",
                                      default=UNSET)
    eta: float | None | Unset = doc("A queued entry's expected start; an admitted or running entry's expected "
                                    "end (Unix seconds; null: unknown). Only with `?eta=true`.", default=UNSET)
    eta_basis: str | Unset = doc(
        "What `eta` rests on: `runtime` (the specs' own `runtime:`), or `estimate from ...` naming the "
        "operator's defaults used for specs without one (e.g. `estimate from class training default`); empty "
        "when `eta` is null. Only with `?eta=true`.", default=UNSET)
    position: int | None = doc(
        "A queued entry's place in the order the scheduler decides in (1: first): the last cycle's order of "
        "the queue heads (starving heads first, then priority, fair share, age), less what it admitted. Null "
        "where none can be given: not queued, held, waiting for `after:`, beyond its sweep's `max_parallel`, "
        "or submitted since the last cycle.", default=None)
    addresses: dict[str, str] = doc("Where a running entry is reached: port name (as in its spec's `ports`) to "
                                    "`host:port`, as Nomad assigned it; `<group>.<name>` when several allocations "
                                    "have the name. Empty until Nomad reports it running.", default_factory=dict)
    device_health: tuple[str, ...] = doc("A live entry's devices Nomad reports unhealthy, one note each "
                                         "(`<id> unhealthy since <UTC time>: <why>`); Nomad leaves it running.",
                                         default=())
    preemptions: int = doc("Times its GPUs were taken back for a waiting job (docs/classes.md, Preemption); "
                           "each time it was queued again without using a retry.", default=0)
    warnings: tuple[str, ...] = doc("What the service warns of, one line each: a `checkpoint.grace` longer than "
                                    "the nodes' max_kill_timeout (Nomad kills the task sooner).", default=())


@dataclass(frozen=True)
class Entries(Payload):
    entries: tuple[Entry, ...] = ()


@dataclass(frozen=True)
class Sweep(Payload):
    """A sweep's trials and their counts by state."""

    sweep: str = ""
    total: int = 0
    states: dict[str, int] = field(default_factory=dict)
    trials: tuple[Entry, ...] = ()


# ---- what Nomad holds for an entry -----------------------------------------------------------------

@dataclass(frozen=True)
class Allocation(Payload):
    """One of an entry's Nomad allocations."""

    id: str = ""
    group: str = ""
    index: int = 0
    node_id: str = ""
    node_name: str = ""
    client_status: str = ""
    desired_status: str = ""
    tasks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Allocations(Payload):
    """An entry's times and its current attempt's allocations."""

    id: str = ""
    nomad_job_id: str = ""
    namespace: str = "default"
    submitted_at: float = doc("Unix seconds", default=0.0)
    admitted_at: float | None = doc("Unix seconds", default=None)
    started_at: float | None = doc("Unix seconds", default=None)
    finished_at: float | None = doc("Unix seconds", default=None)
    waited_s: float = 0.0
    ran_s: float | None = None
    allocations: tuple[Allocation, ...] = ()
    nomad_ui: str | Unset = doc("The job's page in Nomad's UI (when the service knows Nomad's address).",
                                default=UNSET)


@dataclass(frozen=True)
class Hcl(Payload):
    """The HCL Nomad stored with the job's current version."""

    id: str = ""
    nomad_job_id: str = ""
    namespace: str = "default"
    version: int = 0
    format: str = ""
    hcl: str = ""


# ---- the cluster -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Holder(Payload):
    """Who holds a device: an entry and its team (another team's is named neither), and how much of it."""

    entry: str | None = None
    team: str = ""
    milli: int = 1000


@dataclass(frozen=True)
class GpuView(Payload):
    """A physical GPU offered whole or as time-slice shares."""

    id: str = ""
    model: str = ""
    mode: str = doc("whole, shared or flex.", default="whole")
    healthy: bool = True
    free_milli: int = 0
    holders: tuple[Holder, ...] = ()
    pci_bus_id: str | None = doc("The GPU's PCI bus ID, from its fingerprint (null: not reported).", default=None)
    nvlink_group: int | None = doc("Which of the node's `nvlink_groups` this GPU is in (null: no NVLink, or no "
                                   "topology published).", default=None)
    numa_node: int | None = doc("The NUMA node the GPU hangs off (null: not published).", default=None)
    health: str = doc("Why the device plugin reports it unhealthy (empty: healthy).", default="")
    unhealthy_since: float | None = doc("Unix seconds it was first seen unhealthy (null: healthy).", default=None)


@dataclass(frozen=True)
class MigView(Payload):
    """A MIG instance (its own Nomad device)."""

    id: str = ""
    device: str = ""
    healthy: bool = True
    profile: str = ""
    free: bool = False
    holders: tuple[Holder, ...] = ()
    pci_bus_id: str | None = doc("The parent GPU's PCI bus ID (MIG instances share it); null: not reported.",
                                 default=None)
    compute_slices: int = 0
    gpu: str | None = doc("The parent GPU's UUID, where the node's device plugin publishes placements (the "
                          "nomad-gpu plugin does; the stock plugin does not: null).", default=None)
    start: int | None = doc("Its first memory slice (0-7), with `gpu`; null: not published.", default=None)
    memory_slices: int | None = doc("How many memory slices it spans (a 3g.40gb 4 of 8), with `gpu`.", default=None)
    health: str = doc("Why the device plugin reports it unhealthy (empty: healthy).", default="")
    unhealthy_since: float | None = doc("Unix seconds it was first seen unhealthy (null: healthy).", default=None)


@dataclass(frozen=True)
class MigRelayoutView(Payload):
    """A MIG re-layout of one GPU in flight (`docs/mig-relayout.md`)."""

    layout: tuple[str, ...] = doc("The whole target layout, `profile@start` items.", default=())
    creates: tuple[str, ...] = doc("The items of `layout` the GPU does not have yet.", default=())
    destroys: tuple[str, ...] = doc("The idle instances it replaces (MIG instance IDs).", default=())
    phase: str = doc("`applying` (the apply job runs) or `fingerprint` (waiting for Nomad's node to show it).",
                     default="")
    started_at: float = doc("Unix seconds", default=0.0)


@dataclass(frozen=True)
class MigGpu(Payload):
    """One MIG-partitioned physical GPU: its instances in the node's order, and its compute slices."""

    pci_bus_id: str = ""
    model: str = ""
    slices: int = doc("Compute slices of the whole GPU (7; 4 on an A30).", default=7)
    used_slices: int = 0
    free_slices: int = doc("Compute slices of free, healthy instances.", default=0)
    instances: tuple[str, ...] = doc("Its MIG instance IDs (see `migs`).", default=())
    uuid: str | None = doc("The GPU's UUID where the node's device plugin publishes placements; null: not "
                           "published, its layout is not known (the stock plugin).", default=None)
    memory_slices: int = doc("Memory slices of the whole GPU, where instances are placed (8).", default=8)
    relayout: MigRelayoutView | None = doc("A re-layout of this GPU in flight; null: none.", default=None)


@dataclass(frozen=True)
class NodeView(Payload):
    """A node with its GPUs, MIG instances and shares, free and total."""

    id: str = ""
    name: str = ""
    datacenter: str = "dc1"
    status: str = ""
    schedulable: bool = True
    cpu_mhz: int = 0
    memory_mb: int = 0
    cpu_free: int = 0
    memory_free: int = 0
    draining: bool = False
    eligible: bool = True
    node_pool: str = "default"
    gpus: tuple[GpuView, ...] = ()
    migs: tuple[MigView, ...] = ()
    mig_gpus: tuple[MigGpu, ...] = doc("MIG instances grouped by the physical GPU they are slices of (those "
                                       "whose bus ID is reported).", default=())
    topology: bool = doc("Whether the node's device plugin publishes its GPUs' interconnect (the nomad-gpu plugin "
                         "does, the stock NVIDIA plugin does not: how its GPUs are joined is unknown).", default=False)
    nvlink_groups: tuple[tuple[str, ...], ...] = doc("GPU IDs joined by NVLink (an NVSwitch fabric, or a bridged "
                                                     "pair), one list per group.", default=())
    gpu_util_pct: float | None = doc("Mean GPU utilisation of the node's devices that running entries hold, as "
                                     "their device plugin reports it (null: none reports one).", default=None)
    gpu_util_devices: int = doc("How many devices `gpu_util_pct` is the mean of.", default=0)


@dataclass(frozen=True)
class Inventory(Payload):
    nodes: tuple[NodeView, ...] = ()
