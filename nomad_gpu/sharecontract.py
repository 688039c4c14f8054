"""The share contract: how the project's device plugin advertises time-slice shares to Nomad.

One shared GPU of N slots is N share instances `<GPU uuid>-share-<k>` in a device group of vendor
`nomad-gpu` and type `shared-gpu`, named `<model>` (or `<model> (<N> slots)` when GPUs of one model
have different slot counts); a slot is 1000/N milli-GPU and a share of M milli takes ceil(M / slot)
instances (docs/node.md, "The share contract"). The plugin writes it, the decoder reads it back from
fingerprints, the renderer pins it, usage folds a GPU's instances into one and the CLI previews it.

It lives here, at the package's top level with no imports of ours, because every one of those
layers reads it and none of them may import another's modules (tests/test_layers.py). The dev
cluster keeps its own copy on purpose: it judges this code, so it shares none of it.
"""

from __future__ import annotations

import re

__all__ = ["MILLI_PER_GPU", "SHARED_TYPE", "SHARED_VENDOR", "SHARE_DEVICE_PREFIX", "SHARE_SEP", "group_name",
           "instances_for", "milli_of", "model_of_group", "parse_share_id", "share_id"]

MILLI_PER_GPU = 1000
SHARED_VENDOR, SHARED_TYPE = "nomad-gpu", "shared-gpu"
SHARE_DEVICE_PREFIX = f"{SHARED_VENDOR}/{SHARED_TYPE}/"
"""A job's device block names share instances as `nomad-gpu/shared-gpu/<group name>`."""
SHARE_SEP = "-share-"
"""Share instance IDs are `<GPU uuid>-share-<k>`."""
_SLOTS_SUFFIX = re.compile(r" \(\d+ slots\)$")


def share_id(gpu_uuid: str, k: int) -> str:
    """The ID of share instance `k` of a GPU."""
    return f"{gpu_uuid}{SHARE_SEP}{k}"


def parse_share_id(device_id: str) -> tuple[str, int] | None:
    """`<uuid>-share-3` -> (`<uuid>`, 3); anything else -> None. The GPU UUID is what the ID maps back to."""
    uuid, sep, k = device_id.rpartition(SHARE_SEP)
    if not sep or not uuid or not k.isdigit():
        return None
    return uuid, int(k)


def group_name(model: str, slots: int, mixed: bool) -> str:
    """The device group of a model's share instances; `mixed`: its GPUs have different slot counts."""
    return f"{model} ({slots} slots)" if mixed else model


def model_of_group(name: str) -> str:
    """The model a share device group stands for (`group_name` undone)."""
    return _SLOTS_SUFFIX.sub("", name)


def instances_for(milli: int, slots: int) -> int:
    """Share instances a share of `milli` takes on a GPU of `slots`: ceil(milli / (1000 / slots)), in integers."""
    return -(-milli * slots // MILLI_PER_GPU) if slots else 0


def milli_of(instances: int, slots: int) -> int:
    """Milli-GPU that `instances` share instances of a GPU of `slots` stand for."""
    return instances * MILLI_PER_GPU // slots if slots else 0
