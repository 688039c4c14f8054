"""One unit of GPU capacity (DESIGN 3.3) and the MIG profile names it is computed from.

Usage, quotas and fair share are counted in GPU-equivalents: a whole GPU is 1, a MIG slice is its
compute slices over the parent's (1g on a 7-slice GPU = 1/7), a time-slice share is milli/1000.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.domain.ids import MILLI_PER_GPU

# "3g.40gb", "1g.10gb+me", "1g.5gb+gfx", "1c.3g.40gb" (a compute-instance profile on a 3g GPU instance)
_PROFILE = re.compile(r"^(?:(?P<ci>\d+)c\.)?(?P<g>\d+)g\.(?P<mem>\d+)gb(?P<ext>(?:\+[a-z]+)*)$")

SLICES_A30 = 4
SLICES_DEFAULT = 7


@dataclass(frozen=True, order=True)
class MigProfile:
    """A parsed MIG profile: compute slices and memory of one instance."""

    name: str
    compute_slices: int
    memory_gb: int

    @staticmethod
    def parse(name: str) -> MigProfile:
        m = _PROFILE.match(name.strip().lower())
        if not m:
            raise InvalidInventory(f"not a MIG profile name: {name!r} (expected e.g. '3g.40gb')")
        g = int(m.group("g"))
        ci = int(m.group("ci")) if m.group("ci") else g
        return MigProfile(name=name.strip().lower(), compute_slices=min(ci, g), memory_gb=int(m.group("mem")))

    def gpu_equivalents(self, parent_slices: int = SLICES_DEFAULT) -> float:
        return self.compute_slices / parent_slices


def parent_slices_for_model(model: str) -> int:
    """Compute slices of the parent GPU: 4 on an A30, 7 on the A100/H100/H200/B200 family."""
    return SLICES_A30 if "A30" in model.upper() else SLICES_DEFAULT


def split_mig_device_name(name: str) -> tuple[str, str] | None:
    """`"NVIDIA H100 80GB HBM3 MIG 3g.40gb"` -> (`"NVIDIA H100 80GB HBM3"`, `"3g.40gb"`); else None."""
    model, sep, profile = name.rpartition(" MIG ")
    if not sep or not model or not profile:
        return None
    return model, profile


def share_gpu_equivalents(milli: int) -> float:
    return milli / MILLI_PER_GPU
