"""Where each MIG instance sits, in a form Nomad carries: one group attribute per instance.

Nomad's fingerprint of a device instance holds its ID, health and `Locality.PciBusID` only
(`Device`, plugins/device/device.go), so neither an instance's parent GPU UUID nor its placement over
the memory slices reaches the servers by itself; without them the service cannot tell which idle
instances make room for a larger one. Attributes are the one free-form part of a device group
(`DeviceGroup.Attributes`; `DeviceGroup.Validate` checks each value, not the names; same file, v2.0.5),
and a group holds every instance of one profile on the node, so each instance gets its own attribute,
keyed by its ID:

    mig.<MIG-uuid> = "<GPU-uuid>@<start>/<size>"        e.g. "GPU-5d1c...@4/4"

a string of about 50 characters per instance (7 at most per GPU). `nomad_gpu/nomad/migdecode.py`
reads it back. An instance whose placement NVML does not give (an unprivileged read) gets none, and the
service then leaves its GPU's layout alone.
"""

from __future__ import annotations

from nomad_gpu.nvml import Gpu, MigDevice

ATTRIBUTE_PREFIX = "mig."


def placement_value(gpu_uuid: str, start: int, size: int) -> str:
    return f"{gpu_uuid}@{start}/{size}"


def placement_attribute(gpu: Gpu, mig: MigDevice) -> tuple[str, str, str] | None:
    """(name, value, unit) for one MIG instance, or None when its placement is unknown."""
    if mig.placement_start is None or mig.placement_size is None:
        return None
    return f"{ATTRIBUTE_PREFIX}{mig.uuid}", placement_value(gpu.uuid, mig.placement_start, mig.placement_size), ""
