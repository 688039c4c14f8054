"""Who ran where and when, from the audit's client truth: live tenants per device, and overlapping runs.

The audit's `finished_at` is when an allocation's task really stopped on its node (partitions.py): a
task the servers called lost while it ran on, cut off, is still a tenant of its devices. So two
allocations whose spans overlap on one device had two live tenants at once, whatever Nomad's servers
believed, and two of one entry whose spans overlap ran it twice at the same time. A lost attempt that
the service queued again after its task was gone runs again by design: only overlapping runs count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

Alloc = dict[str, Any]


def _span(a: Alloc) -> tuple[float, float]:
    return a["started_at"], a["finished_at"] if a.get("finished_at") is not None else math.inf


def device_overlaps(allocs: Iterable[Alloc]) -> int:
    """Consecutive runs on one whole device (time-slice shares left out) that overlapped in time."""
    by_device: dict[str, list[Alloc]] = {}
    for a in allocs:
        if a.get("started_at") is None or a.get("share_gpu") is not None:
            continue
        for dev in a["device_ids"]:
            by_device.setdefault(dev, []).append(a)
    n = 0
    for runs in by_device.values():
        runs.sort(key=lambda a: a["started_at"])
        for prev, nxt in zip(runs, runs[1:], strict=False):
            if nxt["started_at"] < _span(prev)[1] - 1e-9:
                n += 1
    return n


def live_tenants_max(allocs: Iterable[Alloc]) -> int:
    """The most allocations whose tasks ran on one whole device at one instant."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for a in allocs:
        if a.get("started_at") is not None and a.get("share_gpu") is None:
            for dev in a["device_ids"]:
                spans.setdefault(dev, []).append(_span(a))
    return max((sum(1 for s, e in runs if s <= start < e) for runs in spans.values() for start, _ in runs),
               default=0)


def ran_at_once(allocs: Iterable[Alloc]) -> bool:
    """Whether two of these allocations (of one entry) ran at the same time."""
    runs = sorted(_span(a) for a in allocs if a.get("started_at") is not None)
    return any(nxt[0] < prev[1] - 1e-9 for prev, nxt in zip(runs, runs[1:], strict=False))


def still_live(a: Alloc) -> bool:
    """Not over: pending, `unknown`, or its task still running on its node (whatever the servers say)."""
    return a["client_status"] in ("pending", "unknown") or bool(a.get("task_running"))
