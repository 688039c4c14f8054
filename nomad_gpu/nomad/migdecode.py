"""Nomad node JSON -> where each MIG instance sits, and whether the operator allows re-layouts there.

The project's device plugin publishes one attribute per MIG instance in its device group,
`mig.<MIG-uuid> = "<GPU-uuid>@<start>/<size>"` (nomad_gpu/plugin/migplacement.py), because Nomad's
fingerprint of an instance carries only its ID, health and PCI bus ID. The stock NVIDIA plugin
publishes none, so its nodes decode to no placements and their layouts stay as the operator made them.
Re-layouts are opted in per node with the client's `meta { nomad_gpu_mig_relayout = "true" }`
(`Node.Meta`, a map of strings, nomad/structs/structs.go v2.0.5).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.miglayout import Placed, geometry_for
from nomad_gpu.domain.migplanner import MigGpu, MigInstance
from nomad_gpu.domain.units import split_mig_device_name
from nomad_gpu.nomad.decode import decode_alloc

logger = logging.getLogger(__name__)

ATTRIBUTE_PREFIX = "mig."
OPT_IN_META = "nomad_gpu_mig_relayout"
_VALUE = re.compile(r"^(?P<gpu>GPU-[0-9A-Za-z-]+)@(?P<start>\d)/(?P<size>\d)$")


@dataclass(frozen=True)
class MigPlacement:
    """One fingerprinted MIG instance with its parent GPU and its memory slices."""

    instance: InstanceId
    gpu: str
    """The parent GPU's UUID (`GPU-...`)."""
    model: str
    profile: str
    start: int
    size: int
    healthy: bool


def decode_mig_placements(raw: Mapping[str, Any]) -> dict[InstanceId, MigPlacement]:
    """Every MIG instance of a node whose group says where it sits; others are left out.

    A malformed attribute drops only its own instance (logged), never the node.
    """
    out: dict[InstanceId, MigPlacement] = {}
    devices = (raw.get("NodeResources") or {}).get("Devices") or []
    if not isinstance(devices, list):
        return out
    for group in devices:
        if not isinstance(group, Mapping) or group.get("Type") != "gpu":
            continue
        split = split_mig_device_name(str(group.get("Name") or ""))
        attrs = group.get("Attributes")
        if split is None or not isinstance(attrs, Mapping):
            continue
        for inst in group.get("Instances") or []:
            if not isinstance(inst, Mapping) or not inst.get("ID"):
                continue
            iid = InstanceId(str(inst["ID"]))
            attr = attrs.get(ATTRIBUTE_PREFIX + iid)
            if attr is None:
                continue
            value = attr.get("String") if isinstance(attr, Mapping) else None
            m = _VALUE.match(value) if isinstance(value, str) else None
            if m is None:
                logger.warning("node %s: MIG placement of %s unreadable: %r", raw.get("ID"), iid, attr)
                continue
            out[iid] = MigPlacement(iid, m["gpu"], split[0], split[1].lower(), int(m["start"]), int(m["size"]),
                                    bool(inst.get("Healthy", True)))
    return out


def relayout_opted_in(raw: Mapping[str, Any]) -> bool:
    """The node's meta says `nomad_gpu_mig_relayout = "true"` (case-insensitive, as HCL users write it)."""
    meta = raw.get("Meta")
    return isinstance(meta, Mapping) and str(meta.get(OPT_IN_META, "")).strip().lower() == "true"


def busy_instances(allocs: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Device instance IDs held by allocations that are not terminal (ours and foreign alike): an instance
    a pending allocation holds is as busy as one a running task uses, since its task may start any time."""
    out: set[str] = set()
    for raw in allocs:
        alloc = decode_alloc(raw)
        if not alloc.is_terminal:
            out.update(alloc.device_ids)
    return frozenset(out)


def mig_gpus(raw: Mapping[str, Any], busy: frozenset[str], *, opted_in: bool,
             last_relayout_at: Mapping[str, float] | None = None) -> list[MigGpu]:
    """The node's MIG-mode GPUs with placements, for the re-layout planner. A GPU whose profile table
    cannot be told from its instances (an unknown model) is left out: its layout stays as it is."""
    by_gpu: dict[str, list[MigPlacement]] = {}
    for p in decode_mig_placements(raw).values():
        by_gpu.setdefault(p.gpu, []).append(p)
    node = NodeId(str(raw.get("ID") or ""))
    out: list[MigGpu] = []
    for gpu, placed in sorted(by_gpu.items()):
        model = placed[0].model
        geometry = geometry_for(model, [(p.profile, p.size) for p in placed])
        if geometry is None:
            continue
        # An unhealthy instance counts as busy: it is no capacity, and nothing should be laid over it.
        instances = tuple(MigInstance(p.instance, Placed(p.start, p.size, p.profile),
                                      p.instance in busy or not p.healthy) for p in placed)
        out.append(MigGpu(node, gpu, model, geometry, instances, opted_in,
                          (last_relayout_at or {}).get(gpu)))
    return out
