"""The arithmetic of MIG profile names: how many of a GPU's 8 memory slices a `<g>g.<GB>gb` profile takes,
and the memory its instance reports.

It exists apart from the cluster file (`config.py`), which validates layouts with it, and the layout
engine (`miglayout.py`), which places instances with it: both read these sizes, and the validator also
asks the layout engine whether a layout can be placed, so the sizes sit below both.
"""

from __future__ import annotations

import re

MIG_PROFILE_RE = re.compile(r"^(?P<g>[1-7])g\.(?P<gb>\d+)gb(?P<me>\+me)?$")

# Memory slices used by each compute size on the 7-slice family (reference/nvml-mig.md section 3.2);
# a 1g profile with twice the memory (1g.20gb on an 80 GB part) uses two, derived from its GB below.
MEMORY_SLICES_BY_COMPUTE = {1: 1, 2: 2, 3: 4, 4: 4, 7: 8}


def mig_memory_slices(profile: str, parent_memory_mib: int) -> int:
    """How many of the 8 memory slices a MIG profile takes on a GPU with this much memory."""
    match = MIG_PROFILE_RE.match(profile)
    if match is None:  # pragma: no cover - profiles are validated before this is called
        raise ValueError(profile)
    parent_gb = max(1, -(-parent_memory_mib // 1024))
    by_memory = round(int(match["gb"]) * 8 / parent_gb)
    return max(MEMORY_SLICES_BY_COMPUTE[int(match["g"])], by_memory, 1)


# What NVML keeps back per instance, by the memory slices it takes: the `-lgip` sizes of both SKUs the
# reference tabulates (reference/nvml-mig.md section 4: H100 80GB SXM 9.75 / 19.62 / 39.50 / 79.25 GiB,
# A100 40GB 4864 / 9856 / 19968 / 40192 MB) are slices * (parent / 8) less exactly these MiB.
_MIG_MEMORY_HELD_BACK_MIB = {1: 256, 2: 384, 4: 512, 8: 768}


def mig_memory_mib(profile: str, parent_memory_mib: int) -> int:
    """The memory a MIG instance reports: the stock plugin's `memory` attribute is NVML's total memory of the
    MIG handle in whole MiB (`nvml/driver_linux.go` DeviceInfoByUUID, DeviceGetMemoryInfo, bytes >> 20,
    hashicorp/nomad-device-nvidia v1.1.0), less than the profile's name says: an H100's 1g.10gb reports
    9.75 GiB, not 10."""
    slices = mig_memory_slices(profile, parent_memory_mib)
    held_back = _MIG_MEMORY_HELD_BACK_MIB.get(slices, 256 * slices)
    return max(parent_memory_mib * slices // 8 - held_back, 1)
