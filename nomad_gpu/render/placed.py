"""What the scheduler chose for a job, in the shape the renderer needs (DESIGN 3.2).

A job reaches Nomad only with a concrete placement: a node and the exact device instance IDs (or
the shared GPU) the ledger reserved. Kept apart from the checks (`placement`) and the per-kind device
adapters (`devices`) so that both can build on these two types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nomad_gpu.render.hcl import RenderError

__all__ = ["GroupPlacement", "RenderPlacement"]


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
    kind: str = field(default="", compare=False)
    """The GPU kind placed (``whole``, ``mig``, ``share``, or one a deployment registers): which device
    adapter renders it (`devices`); empty: the kind the spec group asks for."""


@dataclass(frozen=True)
class RenderPlacement:
    """A whole job's placement: one node (gangs are placed on one node) and every group."""

    node_id: str
    groups: tuple[GroupPlacement, ...]
    node_pool: str | None = None
    """The chosen node's pool, rendered when the spec names none (an entry stored before the service bound
    each spec to its pool at submit: it was placed in `default`, where Nomad puts a job without a pool,
    `nomad/job_endpoint_hook_node_pool_ce.go`, and scans only that pool, `scheduler/util.go`, v2.0.5)."""

    def for_group(self, name: str) -> GroupPlacement:
        """The placement of the group called ``name``."""
        for group in self.groups:
            if group.group == name:
                return group
        raise RenderError(f"the placement has no group {name!r}")
