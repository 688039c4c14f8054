"""Sweep trials beyond their sweep's `max_parallel`: held out of the cycle, each told why.

Slurm shows such an array task as pending with reason `JobArrayTaskLimit`; here the reason names the
sweep and its limit, and how the slots are used (`sweep lr-hpo-s1 at max_parallel 16: 4 running, 12
queued ahead`), so a user reading the queue knows the wait is the sweep's own choice, not the cluster's.
Trials take the free slots in entry order (their order of submission), so the same trials are offered
each cycle until one of the running ones ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

__all__ = ["throttle", "throttle_reason"]


class Trial(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def sweep(self) -> str | None: ...


def throttle_reason(sweep: str, limit: int, running: int) -> str:
    """Why a sweep trial beyond its sweep's parallelism waits (the cycle never considers it)."""
    return f"sweep {sweep} at max_parallel {limit}: {running} running, {max(limit - running, 0)} queued ahead"


def throttle(queued: Sequence[Trial], live: Iterable[Trial], limits: Mapping[str, int]
             ) -> tuple[list[int], dict[str, str]]:
    """The indexes of `queued` the cycle may consider (in entry-ID order), and the reason of each trial
    held back, by entry ID. `live`: entries holding capacity (each counts against its sweep's limit)."""
    running: dict[str, int] = {}
    for e in live:
        if e.sweep:
            running[e.sweep] = running.get(e.sweep, 0) + 1
    taken = dict(running)
    keep: list[int] = []
    held: dict[str, str] = {}
    for i in sorted(range(len(queued)), key=lambda i: queued[i].id):
        sweep = queued[i].sweep
        limit = limits.get(sweep or "")
        if sweep and limit is not None:
            if taken.get(sweep, 0) >= limit:
                held[queued[i].id] = throttle_reason(sweep, limit, running.get(sweep, 0))
                continue
            taken[sweep] = taken.get(sweep, 0) + 1
        keep.append(i)
    return keep, held
