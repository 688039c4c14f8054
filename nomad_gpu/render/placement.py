"""What the scheduler chose for a job, in the shape the renderer needs, and its checks.

DESIGN 3.2: a job reaches Nomad only with a concrete placement: a node and the exact
device instance IDs (or the shared GPU) the ledger reserved. The renderer pins
exactly these, so a placement that does not match its spec (a missing group, the
wrong number of IDs, an ID with a comma that would widen the ``${device.ids}`` set)
is a bug upstream and must fail loudly here, before Nomad is told anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from nomad_gpu.render.hcl import RenderError
from nomad_gpu.render.spec import GroupSpec, JobSpec
from nomad_gpu.sharecontract import SHARE_DEVICE_PREFIX

__all__ = ["SHARE_DEVICE_PREFIX", "GroupPlacement", "RenderPlacement", "check_placement"]



@dataclass(frozen=True)
class GroupPlacement:
    """Where one task group goes: the device group and instance IDs, or a GPU share."""

    group: str
    """The spec group's name."""
    device_name: str | None
    """``nvidia/gpu/<model>``, ``nvidia/gpu/<model> MIG <profile>``, or for a share pinned to the device
    plugin's share instances ``nomad-gpu/shared-gpu/<group>``; None for an advisory share / no GPU."""
    device_ids: tuple[str, ...]
    """The exact instance IDs to pin (``GPU-...``, ``MIG-...`` or ``GPU-...-share-<k>``), for all
    allocations of the group."""
    share_gpu: str | None = None
    """The ``GPU-...`` ID of the shared GPU a time-slice share runs on."""
    share_milli: int | None = None
    """The milli-GPU reserved on ``share_gpu`` (at least what the spec asked for)."""


@dataclass(frozen=True)
class RenderPlacement:
    """A whole job's placement: one node (gangs are placed on one node) and every group."""

    node_id: str
    groups: tuple[GroupPlacement, ...]
    node_pool: str | None = None
    """The chosen node's pool, rendered when the spec names none: Nomad fills in `default` and scans
    only that pool (`nomad/job_endpoint_hook_node_pool_ce.go`, `scheduler/util.go`, v2.0.5)."""

    def for_group(self, name: str) -> GroupPlacement:
        """The placement of the group called ``name``."""
        for group in self.groups:
            if group.group == name:
                return group
        raise RenderError(f"the placement has no group {name!r}")


def check_placement(spec: JobSpec, placement: RenderPlacement) -> None:
    """Raise :class:`RenderError` unless ``placement`` is exactly what ``spec`` asks for."""
    if not placement.node_id or _has_control_or_space(placement.node_id):
        raise RenderError(f"invalid node id {placement.node_id!r}")
    names = [group.group for group in placement.groups]
    if len(set(names)) != len(names):
        raise RenderError(f"the placement lists a group twice: {names}")
    wanted = {group.name for group in spec.groups}
    extra = sorted(set(names) - wanted)
    if extra:
        raise RenderError(f"the placement has groups the spec does not: {extra}")
    for group in spec.groups:
        _check_group(group, placement.for_group(group.name))


def _check_group(group: GroupSpec, placed: GroupPlacement) -> None:
    where = f"group {group.name!r}"
    kind = group.capacity_kind
    if kind in ("gpu", "mig"):
        if not placed.device_name:
            raise RenderError(f"{where} asks for {kind} but its placement names no device")
        expected = group.device_count * group.count
        if len(placed.device_ids) != expected:
            raise RenderError(
                f"{where} needs {expected} device ids ({group.count} x {group.device_count}), "
                f"the placement pins {len(placed.device_ids)}"
            )
        _check_ids(where, placed.device_ids)
    elif kind == "share" and placed.device_name is not None:
        if not placed.device_name.startswith(SHARE_DEVICE_PREFIX) or not placed.device_ids:
            raise RenderError(f"{where}: a share pins share instances of {SHARE_DEVICE_PREFIX}<model>, "
                              f"not {placed.device_name!r} x {len(placed.device_ids)}")
        _check_ids(where, placed.device_ids)
    elif placed.device_name is not None or placed.device_ids:
        raise RenderError(f"{where} asks for no whole device but its placement pins some")
    if group.share is not None:
        if not placed.share_gpu or _has_control_or_space(placed.share_gpu) or "," in placed.share_gpu:
            raise RenderError(f"{where} asks for a share but its placement names no valid shared GPU")
        if placed.share_milli is not None and placed.share_milli < group.share.milli:
            raise RenderError(
                f"{where} asks for {group.share.milli} milli-GPU, the placement reserves {placed.share_milli}"
            )
    elif placed.share_gpu is not None or placed.share_milli is not None:
        raise RenderError(f"{where} asks for no share but its placement has one")


def _check_ids(where: str, device_ids: tuple[str, ...]) -> None:
    if len(set(device_ids)) != len(device_ids):
        raise RenderError(f"{where}: the placement pins a device id twice")
    for device_id in device_ids:
        if not device_id or "," in device_id or _has_control_or_space(device_id):
            raise RenderError(f"{where}: invalid device id {device_id!r}")


def _has_control_or_space(text: str) -> bool:
    return any(char.isspace() or not char.isprintable() for char in text)
