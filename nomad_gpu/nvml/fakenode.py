"""The description a fake NVML answers from: a node's GPUs, their MIG instances, processes, links and faults.

It exists apart from the fake library (`fake.py`) because tests, demos and the layout helpers
(`layouts.py`) build and change these descriptions without calling NVML; the fake reads them.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, replace

_NS = uuidlib.UUID("6f1c1a52-3a0e-4d4b-9f59-0d6b3c2b7a11")


def fake_uuid(prefix: str, *parts: object) -> str:
    """A stable UUID per described device, so IDs survive a plugin restart as real ones do."""
    return f"{prefix}-{uuidlib.uuid5(_NS, '/'.join(map(str, parts)))}"


@dataclass(frozen=True)
class FakeProcess:
    pid: int
    used_mib: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class FakeMig:
    profile: str
    start: int
    size: int
    memory_mib: int
    gpu_instance_id: int
    compute_instance_id: int = 0
    used_mib: int = 0
    uuid: str = ""
    has_compute_instance: bool = True
    """False for a GPU instance whose compute instance was destroyed: it holds its slices, but NVML lists
    no MIG device for it."""


@dataclass(frozen=True)
class FakeGpu:
    name: str
    memory_mib: int
    bus_id: str
    uuid: str = ""
    mig: tuple[bool, bool] | None = None
    """(current, pending); None: the GPU does not support MIG."""
    migs: tuple[FakeMig, ...] = ()
    utilisation: tuple[int, int] = (0, 0)
    used_mib: int = 0
    processes: tuple[FakeProcess, ...] = ()
    lost: bool = False
    numa: int = 0
    pcie_switch: int = 0
    nvlink_peers: tuple[str, ...] = ()
    """Bus ids of GPUs reached by direct NVLink, one entry per link."""
    nvswitch_links: int = 0
    xids: tuple[int, ...] = ()
    """Critical XIDs this GPU raises as soon as someone registers for them."""


@dataclass(frozen=True)
class FakeNode:
    gpus: tuple[FakeGpu, ...]
    driver_version: str = "550.90.07"
    cuda_driver_version: int = 12040
    init_error: int | None = None
    """An NVML code `nvmlInit` fails with, e.g. 12 (no library) or 18 (driver/library mismatch)."""
    numa_ids: bool = True
    """Whether the driver answers `nvmlDeviceGetNumaNodeId` (older ones say "not supported")."""

    def with_ids(self) -> FakeNode:
        """Fill in stable UUIDs where the description left them out."""
        gpus = []
        for i, g in enumerate(self.gpus):
            gid = g.uuid or fake_uuid("GPU", g.name, g.bus_id, i)
            migs = tuple(replace(m, uuid=m.uuid or fake_uuid("MIG", gid, m.gpu_instance_id, m.compute_instance_id))
                         for m in g.migs)
            gpus.append(replace(g, uuid=gid, migs=migs))
        return replace(self, gpus=tuple(gpus))
