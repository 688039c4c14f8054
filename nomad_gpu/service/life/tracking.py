"""What the life cycle keeps about each entry and each ended attempt, and the seams it is driven through.

Kept apart from `lifecycle.py` (which alone moves entries) so that the reconciler, the scheduler and the
read views can name these without reaching into the life cycle's workings.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from nomad_gpu.domain.ids import EntryId, NodeId
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.render import JobSpec
from nomad_gpu.service.life.record import Phase, Record, record_of
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import StopIntent
from nomad_gpu.store.entries import parse_job_id

LIVE = (EntryState.ADMITTED, EntryState.RUNNING, EntryState.PREEMPTING)
"""States in which an entry holds capacity and has (or will have) a Nomad job."""


BULK = ("env", "args")
"""What a task carries that no scheduling decision reads: a waiting entry is held without it."""


def compact(entry: QueueEntry, spec: JobSpec) -> tuple[QueueEntry, JobSpec]:
    """A waiting entry and its spec as held in memory: every task without its environment and arguments
    (up to 1,000 of each, 256 KiB stored), which only the rendered job needs. The store keeps the full
    spec; the register loads it from there (`Registrar._register`). A spec with neither is returned as it
    is (the same object): it is held whole, and the register renders it without reading the store."""
    stored = [g["task"] for g in entry.spec.get("groups") or ()
              if isinstance(g, dict) and isinstance(g.get("task"), dict)]
    if not any(g.task.env or g.task.args for g in spec.groups) and not any(t.get(k) for t in stored for k in BULK):
        return entry, spec
    groups = [{**g, "task": {k: v for k, v in g["task"].items() if k not in BULK}}
              if isinstance(g, dict) and isinstance(g.get("task"), dict) else g
              for g in entry.spec.get("groups") or ()]
    held = {**entry.spec, "groups": groups} if "groups" in entry.spec else dict(entry.spec)
    lean = spec.model_copy(update={"groups": [g.model_copy(update={"task": g.task.model_copy(
        update={"env": {}, "args": []})}) for g in spec.groups]})
    return replace(entry, spec=held), lean


class NotSent(Exception):
    """The register was skipped: the attempt had ended before its turn came."""


class Executor(Protocol):
    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any: ...


def backoff_s(failures: int, base_s: float = 0.5, cap_s: float = 30.0) -> float:
    return min(cap_s, base_s * 2.0 ** max(0, failures - 1))


@dataclass
class Tracked:
    """A queued, admitted or running entry, with what Nomad told us about its current attempt."""

    entry: QueueEntry
    spec: JobSpec | None
    request: JobRequest | None
    allocs: dict[str, AllocInfo] = field(default_factory=dict)
    record: Record | None = None
    """Its current attempt as the life cycle keeps it (service/life/machine.py); built from `entry` if not given."""
    retry_at: float = 0.0
    retry_due: float = 0.0
    """`retry_at` on the steady clock (service/life/timers.py): a wall-clock step back does not hold a retry."""
    running_since: float = 0.0
    """When this process saw the attempt start (0 after a restart: its admission time stands in)."""
    avoid: dict[NodeId, float] = field(default_factory=dict)
    """Nodes where Nomad refused this entry, until when they are left out of its candidates."""
    anchors: dict[float, float] = field(default_factory=dict)
    """For each wall time a timer counts from (admitted, registered, running since): the steady clock's
    reading at that instant, taken when this process first looked (service/life/timers.py)."""
    lean: bool = False
    """`spec` is held without the tasks' env and args (`compact`): the register reads the whole one back."""

    def __post_init__(self) -> None:
        if self.record is None:
            self.record = record_of(self.entry)

    @property
    def attempt(self) -> Record:
        assert self.record is not None
        return self.record

    @property
    def registering(self) -> bool:
        """A register of this attempt is in flight (its reply decides; a stop waits for it)."""
        return self.attempt.registering

    @property
    def failures(self) -> int:
        return self.attempt.failures


@dataclass
class Draining:
    """An ended attempt whose capacity stays held until Nomad confirms its job stopped and ended."""

    job_id: str
    namespace: str
    entry_id: str
    allocs: dict[str, AllocInfo]
    record: Record
    """The ended attempt, in phase `draining` until the transition function releases it."""

    @property
    def register_in_flight(self) -> bool:
        return self.record.registering

    @property
    def stopped(self) -> bool:
        return self.record.stopped

    @property
    def key(self) -> EntryId:
        return EntryId(f"job:{self.job_id}")




class DueTimes:
    """When each entry next needs a look (a register retry, an admission deadline, a wall-time limit).

    A heap, so a scheduling cycle touches only what is due instead of every live entry. A due time is a
    hint, never a decision: the caller checks the entry's current state, so a stale one does nothing.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, when: float, entry_id: str, keep: Container[str], live: int) -> None:
        """Remember `entry_id` at `when`; past 4 per live entry (plus slack), due times of entries not in
        `keep` (ended before their time came) are dropped, so the heap stays bounded."""
        heapq.heappush(self._heap, (when, entry_id))
        if len(self._heap) > 4 * live + 1000:
            self._heap = [d for d in self._heap if d[1] in keep]
            heapq.heapify(self._heap)

    def pop_due(self, now: float) -> list[str]:
        """The entries whose time has come, once each, in due order."""
        due: dict[str, None] = {}
        while self._heap and self._heap[0][0] <= now:
            due[heapq.heappop(self._heap)[1]] = None
        return list(due)


def stored_drains(stops: Iterable[StopIntent], entries: Mapping[str, Tracked], instance: str,
                  draining: Container[str]) -> list[Draining]:
    """An ended attempt whose stop Nomad has not confirmed drains again after a restart: Nomad may still place
    it (a refused job's blocked evaluation is unblocked when capacity frees, nomad/blocked_evals.go v2.0.5), so
    the entry's next attempt waits for the stop and for every allocation of that job to end. Nothing is booked
    for it here: its allocations, as Nomad lists them, are (allocfeed.py)."""
    drains = []
    for s in stops:
        ref = parse_job_id(s.job_id)
        t = entries.get(ref.entry) if ref is not None and ref.instance in ("", instance) else None
        if ref is None or t is None or t.entry.nomad_job_id == s.job_id or s.job_id in draining:
            continue
        record = replace(record_of(t.entry), attempt=ref.attempt, phase=Phase.DRAINING,
                         outcome=t.entry.state, registered=True)
        drains.append(Draining(s.job_id, s.namespace, t.entry.id, {}, record))
    return drains
