"""What a node's NVML says, as frozen values: GPUs, MIG devices, processes, links, or why there is nothing.

The reader (`reader.py`) is the only code that touches NVML; everything downstream (the CLI, the
device plugin) sees these types. A figure NVML does not give is `None`, never zero: "no utilisation on
a MIG-enabled GPU" and "an idle GPU" must stay different things.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Unavailable(StrEnum):
    """Why a node has no NVML inventory. Each is a normal state of a node, not a crash."""

    NO_BINDINGS = "no_bindings"          # nvidia-ml-py is not installed
    NO_LIBRARY = "no_library"            # libnvidia-ml.so.1 not found: no NVIDIA driver on this node
    NO_DRIVER = "no_driver"              # the library is there, the kernel module is not loaded
    VERSION_MISMATCH = "version_mismatch"  # user-space library != kernel module (driver upgraded, no reboot)
    NO_GPU = "no_gpu"                    # the driver runs but sees no GPU
    NO_PERMISSION = "no_permission"      # the device nodes are not readable by this user
    ERROR = "error"                      # any other NVML failure at start


@dataclass(frozen=True)
class NvmlUnavailable:
    reason: Unavailable
    message: str
    """One line a person can act on, e.g. "no NVIDIA driver on this node (libnvidia-ml.so.1 not found)"."""

    def to_json(self) -> dict[str, Any]:
        return {"available": False, "reason": self.reason.value, "message": self.message}


@dataclass(frozen=True)
class MigMode:
    current: bool
    pending: bool

    @property
    def changing(self) -> bool:
        """A mode change waits for a GPU reset: the GPU is in neither state, so nothing should land on it."""
        return self.current != self.pending


@dataclass(frozen=True)
class Process:
    pid: int
    used_memory_mib: int | None
    """None where NVML says "not available" (common under MIG and in containers without PID namespace)."""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class XidError:
    """A critical XID event NVML delivered for a GPU (or one of its MIG GPU instances)."""

    gpu_uuid: str
    code: int
    gpu_instance_id: int | None = None


@dataclass(frozen=True)
class MigDevice:
    uuid: str
    """`MIG-<uuid>`: what NVIDIA_VISIBLE_DEVICES takes and what the stock plugin advertises."""
    name: str
    """NVML's name, `"<model> MIG <profile>"`: the stock plugin's device group name."""
    profile: str
    """e.g. `3g.40gb`."""
    gpu_instance_id: int | None
    compute_instance_id: int | None
    placement_start: int | None
    """In memory slices (0-7); None where NVML refuses the GPU-instance query (unprivileged)."""
    placement_size: int | None
    memory_total_mib: int | None
    memory_used_mib: int | None


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    pci_bus_id: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    utilisation_gpu_pct: int | None
    """None on MIG-enabled GPUs: NVML does not report utilisation there."""
    utilisation_memory_pct: int | None
    mig_mode: MigMode | None
    """None: the GPU does not support MIG."""
    migs: tuple[MigDevice, ...] = ()
    processes: tuple[Process, ...] = ()
    lost: bool = False
    """NVML says the GPU fell off the bus (GPU_IS_LOST): nothing on it works until a reset."""
    error: str | None = None
    """The first NVML failure met while reading this GPU (other than "not supported"), if any."""
    numa_node: int | None = None
    """The NUMA node (CPU socket side) it hangs off; None where NVML does not say or links were not read."""
    nvswitch: bool = False
    """It has NVLinks to an NVSwitch: NVLink to every other such GPU of the node (read with the links)."""

    @property
    def mig_enabled(self) -> bool:
        return self.mig_mode is not None and self.mig_mode.current


@dataclass(frozen=True)
class Link:
    """How two GPUs reach each other (physical GPUs only; MIG devices have no peer-to-peer)."""

    gpu_a: str
    gpu_b: str
    pcie: str | None
    """NVML's common ancestor: board, switch, switches, hostbridge, node, system; None if unknown."""
    nvlinks: int
    """Active NVLink links between the two (directly, not through an NVSwitch)."""


@dataclass(frozen=True)
class Inventory:
    driver_version: str | None
    cuda_driver_version: int | None
    gpus: tuple[Gpu, ...]
    links: tuple[Link, ...] = ()
    nvswitch: bool = False
    """Some GPU has NVLinks to an NVSwitch: all such GPUs are all-to-all on one fabric."""
    xid_errors: tuple[XidError, ...] = field(default=())

    def gpu(self, uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["available"] = True
        return out


NodeReport = Inventory | NvmlUnavailable
"""What a read of NVML gives: the inventory, or the typed reason there is none."""
