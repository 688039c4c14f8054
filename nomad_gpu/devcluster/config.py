"""The dev cluster's cluster file: a small YAML description of nodes and their GPUs.

It exists so that tests, demos and benchmarks can describe a fleet (whole GPUs, MIG layouts,
time-slice-shareable GPUs, several datacenters) in a few lines, and get *deterministic* node and
device IDs out of it: the same file always yields the same `GPU-...`/`MIG-...` IDs, so a trace or a
failing test can be replayed. Validation uses pydantic so that a bad file fails with located errors
("nodes[0].gpus[1].memory_mib: ...") instead of a traceback deep in the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .aclpolicy import AclPolicyError, AclSpec, read_policy_files
from .miglayout import arrange
from .migprofiles import MEMORY_SLICES_BY_COMPUTE, MIG_PROFILE_RE, mig_memory_mib, mig_memory_slices

__all__ = ["ClusterFileError", "ClusterSpec", "GpuSpec", "NodeSpec", "gpu_uuid", "load_cluster_file", "mig_memory_mib",
           "mig_memory_slices", "mig_uuid", "node_id", "parse_cluster"]

# A fixed namespace so that derived IDs never change between releases (changing it would change
# every ID in every recorded trace).
_ID_NAMESPACE = uuid.UUID("5d0f6b52-8f0e-4c52-9d1e-6a4f2c1f9e07")

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


class ClusterFileError(ValueError):
    """A cluster file (or mapping) that cannot be used; the message names the file and the field."""


class GpuSpec(BaseModel):
    """One `gpus:` entry: `count` identical GPUs, optionally MIG-partitioned or shared."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, max_length=120)
    count: int = Field(default=1, ge=1, le=64)
    memory_mib: int = Field(gt=0, le=1 << 24)
    mig: tuple[str, ...] | None = None
    shared: bool = False
    # N share instances of a shared GPU on a node with `device_plugin: nomad-gpu` (the project's plugin
    # advertises them, docs/node.md "The share contract"); 1 to 48 as the plugin accepts.
    slots: int | None = Field(default=None, ge=1, le=48)
    # The interconnect of these GPUs (devcluster/topology.py): `all` an NVSwitch board, `pairs` GPU 2k
    # bridged to 2k+1 in this entry's order, `none` PCIe only. Advertised only by `device_plugin: nomad-gpu`.
    nvlink: Literal["all", "pairs", "none"] = "none"

    @field_validator("mig")
    @classmethod
    def _check_mig(cls, layout: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if layout is None:
            return None
        if not layout:
            raise ValueError("a MIG layout needs at least one profile (omit `mig` for whole GPUs)")
        compute = 0
        for item in layout:
            profile = item.split("@")[0]  # `profile@start` places an instance explicitly (devcluster/miglayout.py)
            match = MIG_PROFILE_RE.match(profile)
            if match is None:
                raise ValueError(f"MIG profile {profile!r} is not of the form '<g>g.<GB>gb', e.g. '3g.40gb'")
            size = int(match["g"])
            if size not in MEMORY_SLICES_BY_COMPUTE:
                raise ValueError(f"MIG profile {profile!r}: there is no {size}g profile")
            compute += size
        if compute > 7:
            raise ValueError(f"MIG layout {list(layout)} uses {compute} compute slices; a GPU has 7")
        return layout

    @model_validator(mode="after")
    def _check_combination(self) -> GpuSpec:
        if self.mig is not None and self.shared:
            raise ValueError("a GPU cannot be both MIG-partitioned and shared")
        if self.slots is not None and not self.shared:
            raise ValueError("`slots` is for a shared GPU (set `shared: true`)")
        if self.nvlink != "none" and self.mig is not None:
            raise ValueError("`nvlink` is for whole GPUs: MIG instances have no peer-to-peer")
        if self.nvlink == "pairs" and self.count % 2:
            raise ValueError(f"`nvlink: pairs` bridges GPU 2k to 2k+1 and needs an even count, not {self.count}")
        if self.mig is not None:
            used = sum(mig_memory_slices(item.split("@")[0], self.memory_mib) for item in self.mig)
            if used > 8:
                raise ValueError(f"MIG layout {list(self.mig)} needs {used} memory slices; a GPU has 8")
            if arrange(self.mig, self.memory_mib) is None:
                raise ValueError(f"MIG layout {list(self.mig)} has no valid placement (3g starts only at slice 0 "
                                 "or 4, 4g and 7g at 0, 2g at 0, 2 or 4; instances may not overlap)")
        return self


class NodeSpec(BaseModel):
    """One node of the cluster file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME_RE)
    id: str | None = Field(default=None, pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    datacenter: str = Field(default="dc1", pattern=_NAME_RE)
    node_pool: str = Field(default="default", pattern=_NAME_RE)
    node_class: str = ""
    cpu_shares: int = Field(default=64000, gt=0)
    memory_mb: int = Field(default=524288, gt=0)
    disk_mb: int = Field(default=1048576, gt=0)
    reserved_cpu_shares: int = Field(default=0, ge=0)
    reserved_memory_mb: int = Field(default=0, ge=0)
    meta: dict[str, str] = Field(default_factory=dict)
    # Task drivers the node fingerprints, name -> healthy; a job needing a missing or unhealthy
    # driver cannot be placed there ("missing drivers", `scheduler/feasible/feasible.go` v2.0.5).
    drivers: dict[str, bool] = Field(default_factory=lambda: {"docker": True, "exec": True, "raw_exec": True})
    # The client's `host_volume` blocks, by name; a group asking for a host volume the node lacks cannot be
    # placed there ("missing compatible host volumes", HostVolumeChecker, `scheduler/feasible/feasible.go`
    # v2.0.5).
    host_volumes: tuple[Annotated[str, Field(pattern=_NAME_RE)], ...] = ()
    gpus: tuple[GpuSpec, ...] = ()
    # Which device plugin fingerprints the GPUs. `nvidia` (the stock nomad-device-nvidia) advertises
    # every GPU whole, shared ones too: sharing is then only the service's advisory `sharing:` setting.
    # `nomad-gpu` (the project's plugin) also advertises a shared GPU's `slots` share instances.
    device_plugin: Literal["nvidia", "nomad-gpu"] = "nvidia"
    # Seconds from a MIG re-layout on the node to Nomad's node showing it (devcluster/miglayout.py): the
    # device plugin's period plus the client's node update; `never` models a plugin that does not notice.
    mig_fingerprint_delay_s: float | Literal["never"] | None = None
    # CPU sockets the GPUs hang off, split evenly in instance order (devcluster/topology.py).
    numa_nodes: int = Field(default=1, ge=1, le=8)

    @model_validator(mode="after")
    def _check_topology(self) -> NodeSpec:
        gpus = sum(gpu.count for gpu in self.gpus)
        if self.numa_nodes > 1 and self.numa_nodes > gpus:
            raise ValueError(f"numa_nodes: {self.numa_nodes} NUMA nodes for {gpus} GPUs")
        fabrics = [gpu.model for gpu in self.gpus if gpu.nvlink == "all"]
        for model in fabrics:
            if sum(1 for gpu in self.gpus if gpu.model == model and gpu.mig is None and not gpu.shared) > 1:
                raise ValueError(f"`nvlink: all` on {model!r}: list the node's whole {model} GPUs in one entry "
                                 "(one device group, one NVSwitch fabric)")
        if gpus > 16 and any(gpu.nvlink != "none" for gpu in self.gpus):
            raise ValueError("topology is described for nodes of at most 16 GPUs (the dev cluster's PCI bus IDs "
                             "repeat beyond)")
        return self

    @model_validator(mode="after")
    def _check_plugin(self) -> NodeSpec:
        for position, gpu in enumerate(self.gpus):
            if gpu.slots is not None and self.device_plugin != "nomad-gpu":
                raise ValueError(f"gpus[{position}]: `slots` needs `device_plugin: nomad-gpu` (the stock plugin "
                                 "has no share instances)")
            if gpu.shared and gpu.slots is None and self.device_plugin == "nomad-gpu":
                raise ValueError(f"gpus[{position}]: a shared GPU under `device_plugin: nomad-gpu` needs `slots`")
        return self

    @model_validator(mode="after")
    def _check_reserved(self) -> NodeSpec:
        if self.reserved_cpu_shares >= self.cpu_shares:
            raise ValueError("reserved_cpu_shares must be below cpu_shares")
        if self.reserved_memory_mb >= self.memory_mb:
            raise ValueError("reserved_memory_mb must be below memory_mb")
        return self


class ClusterSpec(BaseModel):
    """A whole cluster file, validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME_RE)
    nodes: tuple[NodeSpec, ...] = Field(min_length=1)
    # Namespaces jobs may be registered in; `default` always exists (`nomad/namespace_endpoint.go`).
    namespaces: tuple[Annotated[str, Field(pattern=_NAME_RE)], ...] = ("default",)
    # Job garbage collection (`nomad/core_sched.go`): off unless an interval is given; Nomad's server
    # defaults are job_gc_interval 5m and job_gc_threshold 4h (`nomad/config.go`, v2.0.5).
    job_gc_interval_s: float | None = Field(default=None, gt=0)
    job_gc_threshold_s: float = Field(default=4 * 3600.0, ge=0)
    # ACLs on, with these policies (Nomad's HCL) and tokens (aclpolicy.py): rehearse a policy before applying it.
    acl: AclSpec | None = None

    @model_validator(mode="after")
    def _check_unique(self) -> ClusterSpec:
        names = [node.name for node in self.nodes]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"node names must be unique; repeated: {', '.join(duplicates)}")
        ids = [node_id(self, node) for node in self.nodes]
        if len(set(ids)) != len(ids):
            raise ValueError("node ids must be unique")
        return self


def node_id(cluster: ClusterSpec, node: NodeSpec) -> str:
    """The node's ID: given explicitly, or uuid5 of the cluster name and node name."""
    if node.id is not None:
        return node.id
    return str(uuid.uuid5(_ID_NAMESPACE, f"{cluster.name}/node/{node.name}"))


def gpu_uuid(cluster: ClusterSpec, node: NodeSpec, gpu_index: int) -> str:
    """`GPU-<uuid5>` for the node's `gpu_index`-th GPU (counted over all `gpus:` entries)."""
    return "GPU-" + str(uuid.uuid5(_ID_NAMESPACE, f"{cluster.name}/{node.name}/gpu/{gpu_index}"))


def mig_uuid(cluster: ClusterSpec, node: NodeSpec, gpu_index: int, slot: int) -> str:
    """`MIG-<uuid5>` for MIG instance `slot` on the node's `gpu_index`-th GPU."""
    return "MIG-" + str(uuid.uuid5(_ID_NAMESPACE, f"{cluster.name}/{node.name}/gpu/{gpu_index}/mig/{slot}"))


def parse_cluster(data: Mapping[str, Any], source: str = "<cluster>") -> ClusterSpec:
    """Validate an already-loaded mapping (handy for tests that build clusters inline)."""
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise ClusterFileError(_format_errors(source, exc)) from exc


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster YAML file; every problem is a ClusterFileError naming the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClusterFileError(f"{path}: cannot read cluster file: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ClusterFileError(f"{path}: a cluster file must be a mapping with `name` and `nodes`")
    if "acl" in data:  # a policy given as a file name is read beside the cluster file
        try:
            data = {**data, "acl": read_policy_files(data["acl"], path.parent)}
        except AclPolicyError as exc:
            raise ClusterFileError(f"{path}: {exc}") from exc
    return parse_cluster(data, source=str(path))


def _format_errors(source: str, exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        location = ""
        for part in error["loc"]:
            location += f"[{part}]" if isinstance(part, int) else (f".{part}" if location else str(part))
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{source}: {location or '<top>'}: {message}")
    return "\n".join(lines)
