"""Nomad's allocation stats JSON -> per-device figures. The one place its stats field names appear.

`GET /v1/client/allocation/:alloc_id/stats` answers the client's `AllocResourceUsage`
(`command/agent/alloc_endpoint.go` allocStats, `client/structs/structs.go`, `api/tasks.go`, v2.0.5):
`ResourceUsage.DeviceStats` is a list of `DeviceGroupStats` (`Vendor`, `Type`, `Name`, `InstanceStats`
keyed by the allocated device ID), each `DeviceStats` with a `Summary` and `Stats` of `StatValue`s
(`plugins/shared/structs/stats.go`: numerator and denominator as Float or Int, unset ones absent).
The client keeps only the devices the allocation holds (`client/devicemanager/instance.go`).

Figures are read by the names the stock NVIDIA plugin and ours both use: "GPU utilization" (%) and
"Memory state" (MiB in use / total). A figure the plugin does not report stays None, never 0 (MIG
devices report no utilisation at all).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.errors import InvalidInventory

UTILISATION = "GPU utilization"
MEMORY_STATE = "Memory state"


@dataclass(frozen=True)
class DeviceUsage:
    """What one allocated device reports now."""

    device_id: str
    utilisation_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None


def decode_alloc_stats(raw: Any) -> tuple[DeviceUsage, ...]:
    """The devices of one `AllocResourceUsage`, each once, in ID order. InvalidInventory if unreadable."""
    if not isinstance(raw, Mapping):
        raise InvalidInventory(f"allocation stats must be an object, got {type(raw).__name__}")
    groups = list(_device_groups(raw.get("ResourceUsage")))
    if not groups:  # the summed usage is missing: read the tasks' own
        for task in (raw.get("Tasks") or {}).values():
            if isinstance(task, Mapping):
                groups.extend(_device_groups(task.get("ResourceUsage")))
    found: dict[str, DeviceUsage] = {}
    for group in groups:
        instances = group.get("InstanceStats")
        instances = {} if instances is None else instances
        if not isinstance(instances, Mapping):
            raise InvalidInventory("DeviceStats[].InstanceStats must be an object")
        for device_id, stats in instances.items():
            if isinstance(stats, Mapping):
                found[str(device_id)] = _device(str(device_id), stats)
    return tuple(found[k] for k in sorted(found))


def _device_groups(usage: Any) -> list[Mapping[str, Any]]:
    if not isinstance(usage, Mapping):
        return []
    groups = usage.get("DeviceStats") or []
    if not isinstance(groups, list):
        raise InvalidInventory("ResourceUsage.DeviceStats must be a list")
    return [g for g in groups if isinstance(g, Mapping)]


def _device(device_id: str, stats: Mapping[str, Any]) -> DeviceUsage:
    attrs = (stats.get("Stats") or {}).get("Attributes")
    attrs = {} if attrs is None else attrs
    if not isinstance(attrs, Mapping):
        raise InvalidInventory(f"device {device_id}: Stats.Attributes must be an object")
    util = _numerator(attrs.get(UTILISATION))
    memory = attrs.get(MEMORY_STATE)
    return DeviceUsage(device_id, util, _numerator(memory), _denominator(memory))


def _numerator(value: Any) -> float | None:
    return _number(value, "FloatNumeratorVal", "IntNumeratorVal")


def _denominator(value: Any) -> float | None:
    return _number(value, "FloatDenominatorVal", "IntDenominatorVal")


def _number(value: Any, *keys: str) -> float | None:
    if not isinstance(value, Mapping):
        return None
    for key in keys:
        v = value.get(key)
        if v is not None and not isinstance(v, bool):
            try:
                return float(v)
            except (TypeError, ValueError):
                raise InvalidInventory(f"stat value {key} is not a number: {v!r}") from None
    return None
