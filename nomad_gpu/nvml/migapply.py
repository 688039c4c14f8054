"""Re-lay one MIG-mode GPU to a target layout: destroy idle GPU/compute instances, create the missing ones.

This is the node side of a queue-driven re-layout (DESIGN decision 15), run by a short Nomad job on the
node (`nomad-gpu node mig apply`). The target is declarative (the whole layout, `profile@start`
items), so running it twice changes nothing the second time. It never touches a running tenant:

- every instance it would destroy must be listed by the caller as expected idle (`--expect-idle`, what
  the service saw as free when it planned), and NVML must list no process on it; otherwise it refuses
  before changing anything;
- NVML itself refuses to destroy an instance with processes (IN_USE, nvml.h `nvmlGpuInstanceDestroy`),
  and that refusal is reported the same way, with what was already done;
- instances are created at explicit placements (`nvmlDeviceCreateGpuInstanceWithPlacement`), largest
  first, because without a placement the driver picks one and can block the rest (reference/nvml-mig.md
  section 3.1 rule 6); each gets one compute instance spanning it, which is the MIG device CUDA sees.

MIG mode itself is never changed (that may need a GPU reset: an operator action).
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest, NomadGpuError, Unavailable
from nomad_gpu.domain.miglayout import MigGeometry, Placed, geometry_for, parse_layout
from nomad_gpu.nvml import codes
from nomad_gpu.nvml.model import Gpu, Inventory
from nomad_gpu.nvml.reader import NvmlReader, error_code

logger = logging.getLogger(__name__)

COMPUTE_PROFILE_FOR_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}
"""`NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE`: a compute instance as large as its GPU instance."""


class ApplyError(NomadGpuError):
    """A re-layout that did not complete; `report` says what was done, if anything was."""

    def __init__(self, message: str, report: ApplyReport | None = None) -> None:
        super().__init__(message)
        self.report = report


class Refused(ApplyError):
    """The layout would destroy an instance that is not known idle, or that NVML says is in use."""


class ApplyFailed(ApplyError):
    """NVML failed part-way through."""


@dataclass(frozen=True)
class Change:
    id: str
    """The MIG device UUID (`MIG-...`); empty for a created instance whose device NVML did not list."""
    placement: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "placement": self.placement}


@dataclass(frozen=True)
class ApplyReport:
    gpu: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    created: tuple[Change, ...] = ()
    destroyed: tuple[Change, ...] = ()
    dry_run: bool = False
    error: str | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gpu": self.gpu, "before": list(self.before), "after": list(self.after),
                               "created": [c.to_json() for c in self.created],
                               "destroyed": [c.to_json() for c in self.destroyed], "dry_run": self.dry_run}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class _Current:
    id: str
    placed: Placed
    gi: int
    ci: int


def apply_layout(reader: NvmlReader, gpu_uuid: str, layout: str, expect_idle: frozenset[str], *,
                 dry_run: bool = False) -> ApplyReport:
    """Bring `gpu_uuid` to `layout`. Raises InvalidRequest (bad layout or GPU), Refused (exit 3),
    Unavailable (no NVML) or ApplyFailed (NVML failed mid-way)."""
    gpu = _read_gpu(reader, gpu_uuid)
    current = _current(gpu)
    geometry = _geometry(gpu, current, layout)
    target = parse_layout(layout, geometry)
    before = tuple(str(c.placed) for c in sorted(current, key=lambda c: c.placed))
    destroy = [c for c in current if c.placed not in target]
    have = {c.placed for c in current}
    create = sorted((p for p in target if p not in have), key=lambda p: (-p.size, p.start))
    unexpected = [c.id for c in destroy if c.id not in expect_idle]
    if unexpected:
        raise Refused(f"{gpu_uuid}: would destroy {', '.join(unexpected)}, not listed in --expect-idle")
    busy = {p.gpu_instance_id for p in gpu.processes if p.gpu_instance_id is not None}
    in_use = [c.id for c in destroy if c.gi in busy]
    if in_use:
        raise Refused(f"{gpu_uuid}: {', '.join(in_use)} has processes; not destroyed")
    planned = ApplyReport(gpu_uuid, before, tuple(str(p) for p in target),
                          tuple(Change("", str(p)) for p in create),
                          tuple(Change(c.id, str(c.placed)) for c in destroy), dry_run=dry_run)
    if dry_run or (not destroy and not create):
        return planned
    profile_ids = _profile_ids(reader.nvml, reader.handle_by_uuid(gpu_uuid))
    done: list[Change] = []
    try:
        for c in destroy:
            _destroy(reader.nvml, gpu_uuid, c)
            done.append(Change(c.id, str(c.placed)))
        for p in create:
            _create(reader.nvml, reader.handle_by_uuid(gpu_uuid), profile_ids, p, geometry)
    except Exception as exc:
        code = error_code(exc)
        if code is None:
            raise
        report = _after(reader, gpu_uuid, before, tuple(done), current, f"NVML error {code}: {exc}")
        if code == codes.IN_USE:
            raise Refused(f"{gpu_uuid}: NVML says an instance is in use ({exc}); stopped", report) from exc
        raise ApplyFailed(f"{gpu_uuid}: NVML failed during the change ({exc})", report) from exc
    return _after(reader, gpu_uuid, before, tuple(done), current, None)


def _read_gpu(reader: NvmlReader, gpu_uuid: str) -> Gpu:
    inventory = reader.read(links=False)
    if not isinstance(inventory, Inventory):
        raise Unavailable(inventory.message)
    gpu = inventory.gpu(gpu_uuid)
    if gpu is None:
        raise InvalidRequest(f"no GPU {gpu_uuid} on this node")
    if not gpu.mig_enabled or (gpu.mig_mode is not None and gpu.mig_mode.changing):
        raise InvalidRequest(f"{gpu_uuid} is not in MIG mode (changing the mode is an operator action)")
    return gpu


def _current(gpu: Gpu) -> list[_Current]:
    out = []
    for m in gpu.migs:
        if None in (m.placement_start, m.placement_size, m.gpu_instance_id, m.compute_instance_id):
            raise Unavailable(f"{gpu.uuid}: NVML gives no placement for {m.uuid} (needs privilege)")
        assert m.placement_start is not None and m.placement_size is not None
        assert m.gpu_instance_id is not None and m.compute_instance_id is not None
        out.append(_Current(m.uuid, Placed(m.placement_start, m.placement_size, m.profile),
                            m.gpu_instance_id, m.compute_instance_id))
    return out


def _geometry(gpu: Gpu, current: list[_Current], layout: str) -> MigGeometry:
    seen: list[tuple[str, int | None]] = [(c.placed.profile, c.placed.size) for c in current]
    seen += [(item.split("@")[0].strip().lower(), None) for item in layout.split(",") if "@" in item]
    geometry = geometry_for(gpu.name, seen)
    if geometry is None:
        raise InvalidRequest(f"{gpu.uuid} ({gpu.name}): no known MIG profile table has "
                             f"{', '.join(sorted({p for p, _ in seen})) or 'these profiles'}")
    return geometry


def _profile_ids(nvml: Any, handle: Any) -> dict[str, int]:
    """Profile name -> the ID create calls take, as NVML lists them for this GPU (IDs differ by family)."""
    out: dict[str, int] = {}
    for enum in range(codes.GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except Exception as exc:
            if error_code(exc) in (codes.NOT_SUPPORTED, codes.INVALID_ARGUMENT):
                continue
            raise
        name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
        out.setdefault(name.removeprefix("MIG ").strip().lower(), int(info.id))
    return out


def _destroy(nvml: Any, gpu_uuid: str, c: _Current) -> None:
    parent = nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    gi = nvml.nvmlDeviceGetGpuInstanceById(parent, c.gi)
    ci = nvml.nvmlGpuInstanceGetComputeInstanceById(gi, c.ci)
    nvml.nvmlComputeInstanceDestroy(ci)
    nvml.nvmlGpuInstanceDestroy(gi)
    logger.info("destroyed %s (%s) on %s", c.id, c.placed, gpu_uuid)


def _create(nvml: Any, parent: Any, profile_ids: dict[str, int], p: Placed, geometry: MigGeometry) -> None:
    shape = geometry.shape(p.profile)
    if p.profile not in profile_ids or shape is None:
        raise Unavailable(f"NVML lists no GPU instance profile {p.profile} on this GPU")
    struct = nvml.c_nvmlGpuInstancePlacement_t(p.start, p.size)
    # nvml.h takes a pointer to the placement; pynvml passes the argument through as given.
    placement = ctypes.byref(struct) if isinstance(struct, ctypes.Structure) else struct
    gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(parent, profile_ids[p.profile], placement)
    info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, COMPUTE_PROFILE_FOR_SLICES[shape.compute],
                                                             codes.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    nvml.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
    logger.info("created %s", p)


def _after(reader: NvmlReader, gpu_uuid: str, before: tuple[str, ...], destroyed: tuple[Change, ...],
           old: list[_Current], error: str | None) -> ApplyReport:
    inventory = reader.read(links=False)
    gpu = inventory.gpu(gpu_uuid) if isinstance(inventory, Inventory) else None
    now = _current(gpu) if gpu is not None else []
    old_ids = {c.id for c in old}
    created = tuple(Change(c.id, str(c.placed)) for c in sorted(now, key=lambda c: c.placed) if c.id not in old_ids)
    after = tuple(str(c.placed) for c in sorted(now, key=lambda c: c.placed))
    return ApplyReport(gpu_uuid, before, after, created, destroyed, error=error)
