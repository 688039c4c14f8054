"""Allocations whose node Nomad's servers lost (`lost`, `unknown`): how long their capacity stays booked.

Nomad frees a lost allocation's devices at once (`EvalContext.ProposedAllocs`, scheduler/feasible/context.go,
v2.0.5), but its task runs on, cut off, until its client stops it: after `disconnect { stop_on_client_after }`
since its last good heartbeat (client/heartbeatstop.go), the stop itself taking up to the task's kill_timeout,
capped at the client's `max_kill_timeout` (30 s by default, command/agent/config.go). The servers mark the
node down at least 20 s after that heartbeat (nomad/heartbeat.go), and the service sees the mark later still,
so once `stop_on_client_after` + the capped kill_timeout + a margin have passed since the service saw the
allocation cut off, the task is gone for certain. Until then (or until the client reports the end on
reconnect) the attempt's capacity stays booked, draining. Without `stop_on_client_after` there is no such
bound: the capacity waits for the client's report. Measured on the steady clock (a wall step moves nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nomad.decode import ALLOC_LOST, AllocInfo
from nomad_gpu.render.durations import Seconds
from nomad_gpu.store.entries import parse_job_id

MAX_KILL_TIMEOUT_S = 30.0
"""The client's `max_kill_timeout` default (command/agent/config.go `DefaultConfig`, v2.0.5 and v1.10.5):
no task takes longer to stop."""
MARGIN_S = 10.0
"""On top: the client's stop and the service's reading of Nomad are not instants."""
DEFAULT_STOP_ON_CLIENT_AFTER_S = 60.0
_SECONDS: TypeAdapter[float] = TypeAdapter(Seconds)


def stop_on_client_after(raw: Any, where: str) -> float | None:
    """`nomad: {stop_on_client_after: 60s}` (a whole number of seconds, 1 s or more; the default 60 s); null
    writes no disconnect block."""
    if not isinstance(raw, Mapping) or "stop_on_client_after" not in raw:
        return DEFAULT_STOP_ON_CLIENT_AFTER_S
    value = raw["stop_on_client_after"]
    if value is None:
        return None
    try:
        seconds = float(_SECONDS.validate_python(value))
    except ValidationError:
        seconds = 0.0
    if seconds < 1 or not seconds.is_integer():
        raise InvalidRequest(f"{where}: stop_on_client_after: must be a whole number of seconds like 60s or 2m "
                             "(1 s or more), or null for no disconnect block")
    return seconds


def bound_s(stop_on_client_after_s: float | None) -> float | None:
    """Seconds after a cut-off allocation is seen until its task is surely stopped; None: no bound."""
    if stop_on_client_after_s is None:
        return None
    return stop_on_client_after_s + MAX_KILL_TIMEOUT_S + MARGIN_S


def reason(a: AllocInfo) -> str:
    """What the entry says when an attempt is queued again for it (`status` shows it)."""
    return (f"its node {a.node_id[:8]} was cut off from Nomad (allocation {a.client_status.value}; its task may "
            "still run there): queued again, no retry used, to start once that task is surely stopped")


def ended_reason(a: AllocInfo) -> str:
    """Why an attempt that ended because its node was cut off (`AllocInfo.ended_cut_off`) is queued again."""
    how = "Nomad called it lost" if a.desired_description == ALLOC_LOST else "its own client stopped its task"
    return (f"its node {a.node_id[:8]} was cut off from Nomad ({how}; the task has ended): queued again, "
            "no retry used")


class CutOffWatch:
    """The cut-off allocations seen, each with the steady time it was first seen so and its job."""

    def __init__(self, bound: float | None, instance: str = "", steady: Callable[[], float] = time.monotonic) -> None:
        """``instance``: this database's job-ID prefix (entries of another service's jobs are not ours)."""
        self.bound, self.instance, self.steady = bound, instance, steady
        self.seen: dict[str, tuple[float, str]] = {}

    def note(self, a: AllocInfo) -> None:
        """Follow one allocation update: a cut-off one is timed from its first sighting, until its client reports
        it ended (`complete`, `failed`). Running again (its node reconnected) is not the end: it is being killed."""
        if a.cut_off:
            self.seen.setdefault(a.id, (self.steady(), a.job_id))
        elif a.is_terminal:
            self.seen.pop(a.id, None)

    def waiting_entries(self) -> set[str]:
        """Entries whose cut-off task may still run: their next attempt waits, so that an entry never runs twice at
        once. Only with a bound (without one, the task may run until its node returns, maybe never)."""
        if self.bound is None:
            return set()
        refs = (parse_job_id(job) for _, job in self.seen.values())
        return {ref.entry for ref in refs if ref is not None and ref.instance in ("", self.instance)}

    def due(self) -> list[tuple[str, str]]:
        """(allocation, job) of each whose bound has passed, no longer followed."""
        if self.bound is None or not self.seen:
            return []
        now = self.steady()
        out = [(alloc, job) for alloc, (since, job) in self.seen.items() if now - since >= self.bound]
        for alloc, _ in out:
            del self.seen[alloc]
        return out
