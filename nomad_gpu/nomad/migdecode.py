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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.units import split_mig_device_name

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
