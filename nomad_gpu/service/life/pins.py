"""Whether Nomad gave an allocation the devices the service pinned for it.

Before 1.11.1 Nomad could place a pinned device ask with fewer instances than it asked for, or with
none (`deviceAllocator.createOffer`: scheduler/device.go v1.10.5, scheduler/feasible/device.go v1.11.0;
fixed by c785f9d50c, #27177, in v1.11.1), when a pinned instance was taken between the service's
decision and Nomad's plan (a foreign job, an unhealthy share instance). The task then runs on fewer
GPUs than booked, or, with the stock plugin's `Reserve([])`, with no `NVIDIA_VISIBLE_DEVICES` at all, so
a CUDA image that defaults to `all` sees every GPU of the node. `AllocatedResources` is the only place
the granted IDs appear; each allocation is checked against its group's booking, and anything else is a
failed attempt (lifecycle.py stops it, keeps the booking until it ended, and queues the entry again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nomad_gpu.nomad.decode import AllocInfo


def pin_mismatch(a: AllocInfo, placements: Sequence[Mapping[str, Any]]) -> str | None:
    """Why `a`'s devices are not what its group booked, or None when they are (or cannot be told).

    A group of `count` allocations pins the union of their instances (render/placement.py), so Nomad
    may hand any allocation any of them: each must get exactly one booking's number of instances, all
    from the union, on the booked node."""
    if not a.resources_known:
        return None  # a stub without resources says nothing about devices
    mine = [p for p in placements if str(p.get("group")) == a.task_group]
    if not mine:
        return None
    union: set[str] = set()
    count = 0
    for p in mine:
        ids = [str(i) for i in p.get("instance_ids") or ()]
        if p.get("share_milli") and not p.get("share_gpu"):
            ids = []  # advisory sharing: the GPU is named in the environment, no device is asked for
        union.update(ids)
        count = len(ids)
    got = set(a.device_ids)
    nodes = {str(p.get("node")) for p in mine}
    if a.node_id in nodes and got <= union and len(a.device_ids) == count:
        return None
    return (f"Nomad placed allocation {a.id[:8]} on {a.node_id} with devices {sorted(got) or 'none'}, not {count} "
            f"of its pins {sorted(union)} (Nomad before 1.11.1 places a pin short when an instance is taken)")
