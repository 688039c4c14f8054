"""The `usage:` config: reading the device stats of running allocations, and when a GPU counts as idle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.confignumbers import read_numbers

__all__ = ["UsageSettings", "usage_from_mapping"]


@dataclass(frozen=True)
class UsageSettings:
    """Reading the device stats of running allocations, and when a held GPU counts as idle."""

    interval_s: float = 30.0
    """Between two rounds of reads; 0 turns the reads off."""
    timeout_s: float = 5.0
    """Of one read (one allocation)."""
    max_allocs: int = 500
    """Allocations read per round at most (the ones read longest ago first)."""
    idle_util_pct: float = 5.0
    """A whole GPU below this utilisation is idle ..."""
    idle_mig_memory_mib: float = 512.0
    """... a MIG instance (which reports no utilisation) below this much memory in use ..."""
    idle_after_s: float = 1800.0
    """... once it has stayed so this long."""


def usage_from_mapping(raw: Any, where: str = "usage") -> UsageSettings:
    """``usage: {interval_s, timeout_s, max_allocs, idle_util_pct, idle_mig_memory_mib, idle_after_s}``."""
    values = read_numbers(raw, UsageSettings(), where,
                          lambda v: isinstance(v, int | float) and v >= 0 and v == v, "must be a number >= 0")
    if values["timeout_s"] <= 0 or int(values["max_allocs"]) < 1:
        raise InvalidRequest(f"{where}: timeout_s must be > 0 and max_allocs >= 1")
    return UsageSettings(interval_s=float(values["interval_s"]), timeout_s=float(values["timeout_s"]),
                         max_allocs=int(values["max_allocs"]), idle_util_pct=float(values["idle_util_pct"]),
                         idle_mig_memory_mib=float(values["idle_mig_memory_mib"]),
                         idle_after_s=float(values["idle_after_s"]))
