"""The fake NVML's MIG hardware: profile tables per GPU model, and GPU/compute instances made and destroyed.

A model of what a MIG-mode GPU does when someone changes its layout, written from the `nvidia-smi mig
-lgip/-lgipp` dumps and nvml.h (reference/nvml-mig.md sections 2, 3.2-3.4), independent of the
planner's own tables so that a wrong table in one cannot hide in the other:

- a GPU instance is created at an explicit placement only if the profile may start there
  (INVALID_ARGUMENT otherwise), its slices are free and the profile's count is not used up
  (INSUFFICIENT_RESOURCES);
- a compute instance is the MIG device processes run on; destroying it, or its GPU instance, while
  processes use it fails with IN_USE, and a GPU instance with a compute instance left fails with IN_USE
  too (nvml.h, `nvmlGpuInstanceDestroy`);
- every new instance gets a new UUID, as on real hardware (an old handle or UUID never comes back).
"""

from __future__ import annotations

from dataclasses import dataclass

from nomad_gpu.nvml import codes


@dataclass(frozen=True)
class FakeProfile:
    enum: int
    """`NVML_GPU_INSTANCE_PROFILE_*` (what `nvmlDeviceGetGpuInstanceProfileInfo` takes)."""
    id: int
    """The profile ID create calls take (differs from the enum, and between families)."""
    name: str
    compute: int
    size: int
    starts: tuple[int, ...]
    count: int
    memory_mib: int


# enum, profile ID, compute slices, memory slices, starts, instanceCount (the 7-slice family's -lgipp)
_SEVEN = ((0x0, 19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7), (0x7, 20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
          (0x9, 15, 1, 2, (0, 2, 4, 6), 4), (0x1, 14, 2, 2, (0, 2, 4), 3), (0x2, 9, 3, 4, (0, 4), 2),
          (0x3, 5, 4, 4, (0,), 1), (0x4, 0, 7, 8, (0,), 1))
# GB in the names per SKU, in _SEVEN's order (1g, 1g+me, 1g 2x memory, 2g, 3g, 4g, 7g); MiB per memory slice.
_SKUS = (("H100 80GB", (10, 10, 20, 20, 40, 40, 80), 10112), ("A100-SXM4-80GB", (10, 10, 20, 20, 40, 40, 80), 9856),
         ("A800-SXM4-80GB", (10, 10, 20, 20, 40, 40, 80), 9856), ("A100-SXM4-40GB", (5, 5, 10, 10, 20, 20, 40), 4864),
         ("H200", (18, 18, 35, 35, 71, 71, 141), 18048))
_A30 = ((0x0, 14, 1, 1, (0, 1, 2, 3), 4, "1g.6gb"), (0x7, 21, 1, 1, (0, 1, 2, 3), 1, "1g.6gb+me"),
        (0x1, 5, 2, 2, (0, 2), 2, "2g.12gb"), (0x3, 0, 4, 4, (0,), 1, "4g.24gb"))

COMPUTE_PROFILE_FOR_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}
"""The `NVML_COMPUTE_INSTANCE_PROFILE_*` enum of a compute instance spanning a whole GPU instance."""


def profiles_for(model: str) -> tuple[FakeProfile, ...]:
    """The GPU-instance profiles NVML lists for a model; empty for models the fake does not know."""
    if "A30" in model:
        return tuple(FakeProfile(e, i, n, c, s, st, k, 6144 * s) for e, i, c, s, st, k, n in _A30)
    for key, gbs, mib in _SKUS:
        if key in model:
            return tuple(FakeProfile(e, i, f"{c}g.{gb}gb{'+me' if e == 0x7 else ''}", c, s, st, k, mib * s)
                         for (e, i, c, s, st, k), gb in zip(_SEVEN, gbs, strict=True))
    return ()


def check_create(profiles: tuple[FakeProfile, ...], taken: list[tuple[int, int, int]], profile_id: int,
                 start: int, size: int) -> FakeProfile | int:
    """The profile to create at `start`, or the NVML return code the real call refuses it with.
    `taken`: (profile ID, start, size) of the GPU instances that exist."""
    profile = next((p for p in profiles if p.id == profile_id), None)
    if profile is None or start not in profile.starts or size != profile.size:
        return codes.INVALID_ARGUMENT
    if sum(1 for pid, _, _ in taken if pid == profile_id) >= profile.count:
        return codes.INSUFFICIENT_RESOURCES
    if any(start < s + n and s < start + size for _, s, n in taken):
        return codes.INSUFFICIENT_RESOURCES
    return profile


def free_gi_id(used: set[int]) -> int:
    """NVML numbers GPU instances from 1 and reuses freed numbers (GI IDs are opaque; section 3.1)."""
    gi = 1
    while gi in used:
        gi += 1
    return gi
