"""What the life cycle does when time passes: register retries, the admission deadline, wall-time
limits and stops still to confirm.

Each entry's next due time sits in a heap (`DueTimes`), so a cycle looks only at what is due rather
than at every live entry. A mixin of `Lifecycle` (service/lifecycle.py), which alone moves entries:
the attributes and methods named under TYPE_CHECKING are the life cycle's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from nomad_gpu.service.metrics import Metrics
from nomad_gpu.service.tracking import DueTimes, Tracked
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.sqlite import SqliteStore

STOPS_CHECK_S = 0.5
"""How often stop intents are looked for (each failed stop already waits 0.5 s or more before its retry)."""


class Timers:
    store: SqliteStore
    metrics: Metrics
    clock: Callable[[], float]
    live: dict[str, Tracked]
    due: DueTimes
    admission_deadline_s: float
    _stops_checked: float

    if TYPE_CHECKING:
        def start_register(self, t: Tracked) -> None: ...
        def start_stop(self, job_id: str, namespace: str) -> None: ...
        def _refused(self, t: Tracked, why: str, now: float) -> None: ...
        def end(self, t: Tracked, to: EntryState, reason: str) -> QueueEntry: ...

    def _schedule(self, when: float, entry_id: str) -> None:
        self.due.add(when, entry_id, self.live, len(self.live))

    def _watch_deadline(self, t: Tracked) -> None:
        if t.entry.registered_at is not None:
            self._schedule(t.entry.registered_at + self.admission_deadline_s, t.entry.id)

    def _watch_runtime(self, t: Tracked) -> None:
        limit = t.spec.max_runtime if t.spec is not None else None
        if limit:
            self._schedule((t.running_since or t.entry.admitted_at or self.clock()) + limit, t.entry.id)

    def tick(self, now: float) -> None:
        """Retry what is due: registers whose reply failed (same pins), stops not yet confirmed; re-queue
        admitted entries Nomad has not placed within the admission deadline; end attempts past their
        wall-time limit. Only entries whose time has come are looked at (a heap of due times; each is
        checked against its current state, so a stale due time does nothing)."""
        for entry_id in self.due.pop_due(now):
            t = self.live.get(entry_id)
            if t is None:
                continue
            if t.registering:  # its reply decides; look again shortly
                self._schedule(now + STOPS_CHECK_S, entry_id)
                continue
            if t.entry.state is EntryState.ADMITTED:
                if t.entry.registered_at is None:
                    if 0 < t.retry_at <= now:
                        self.start_register(t)
                elif not t.allocs and now - t.entry.registered_at >= self.admission_deadline_s:
                    self._refused(t, f"Nomad placed no allocation within {self.admission_deadline_s:g} s", now)
                continue
            limit = t.spec.max_runtime if t.spec is not None else None
            if limit and t.entry.state is EntryState.RUNNING:
                since = t.running_since or t.entry.admitted_at or now
                if now - since >= limit:
                    self.end(t, EntryState.FAILED, f"timeout: still running after max_runtime ({limit:g} s)")
                    self.metrics.finished.labels("timeout").inc()
        if now - self._stops_checked >= STOPS_CHECK_S:  # a query per cycle would cost more than it finds
            self._stops_checked = now
            for s in self.store.stops(due_by=now):
                self.start_stop(s.job_id, s.namespace)
