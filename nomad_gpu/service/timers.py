"""What the life cycle does when time passes: register retries, the admission deadline, wall-time
limits and stops still to confirm.

Durations are measured on a steady (monotonic) clock: a wall-clock step of two hours is not two hours of
run. Times stored by an earlier process are read from the wall clock, less a step the owner measured while
the service was down (service/scheduler.py, the heartbeat).

Each entry's next due time sits in a heap (`DueTimes`), so a cycle looks only at what is due rather
than at every live entry. A mixin of `Lifecycle` (service/lifecycle.py), which alone moves entries:
the attributes and methods named under TYPE_CHECKING are the life cycle's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from nomad_gpu.service.metrics import Metrics
from nomad_gpu.service.tracking import DueTimes, Tracked
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import Store

STOPS_CHECK_S = 0.5
"""How often stop intents are looked for (each failed stop already waits 0.5 s or more before its retry)."""


class Timers:
    store: Store
    metrics: Metrics
    clock: Callable[[], float]
    live: dict[str, Tracked]
    due: DueTimes
    admission_deadline_s: float
    _stops_checked: float
    steady: Callable[[], float] = time.monotonic
    """The clock durations are measured on; the owner sets a fake one in tests."""
    started_at: float = float("-inf")
    """The wall time this process started: a time stored before it may carry a step made while it was down."""
    wall_step: float = 0.0
    started_steady: float = 0.0
    """The steady clock's reading when this process started (with `started_at`)."""
    """How far the wall clock moved beyond the measured downtime before this process started (0: unknown)."""

    if TYPE_CHECKING:
        def start_register(self, t: Tracked) -> None: ...
        def start_stop(self, job_id: str, namespace: str) -> None: ...
        def _refused(self, t: Tracked, why: str, now: float) -> None: ...
        def end(self, t: Tracked, to: EntryState, reason: str) -> QueueEntry: ...

    def _schedule(self, when: float, entry_id: str) -> None:
        """Look at the entry at ``when``, a wall time: kept on the steady clock, so a step moves nothing. A
        register retry (``when`` is the entry's ``retry_at``) remembers its steady due time too."""
        seconds = when - self.clock()
        t = self.live.get(entry_id)
        if t is not None and when == t.retry_at:
            t.retry_due = self.steady() + max(0.0, seconds)
        self._schedule_in(seconds, entry_id)

    def _schedule_in(self, seconds: float, entry_id: str) -> None:
        self.due.add(self.steady() + max(0.0, seconds), entry_id, self.live, len(self.live))

    def _elapsed(self, t: Tracked, since: float, now: float) -> float:
        """Seconds since the wall time ``since``, on the steady clock from the first time this process looks:
        a wall-clock step after that is not elapsed time. What passed before (a time stored by an earlier
        process) is read from the wall clock, less the step the heartbeat showed while the service was down."""
        steady_now = self.steady()
        anchor = t.anchors.get(since)
        if anchor is None:
            before = now - since
            if since < self.started_at:
                before -= self.wall_step
            anchor = t.anchors[since] = steady_now - max(0.0, before)
        return steady_now - anchor

    def _watch_deadline(self, t: Tracked) -> None:
        if t.entry.registered_at is not None:
            left = self.admission_deadline_s - self._elapsed(t, t.entry.registered_at, self.clock())
            self._schedule_in(left, t.entry.id)

    def _watch_runtime(self, t: Tracked) -> None:
        limit = t.spec.max_runtime if t.spec is not None else None
        if limit:
            now = self.clock()
            self._schedule_in(limit - self._elapsed(t, t.running_since or t.entry.admitted_at or now, now),
                              t.entry.id)

    def tick(self, now: float) -> None:
        """Retry what is due: registers whose reply failed (same pins), stops not yet confirmed; re-queue
        admitted entries Nomad has not placed within the admission deadline; end attempts past their
        wall-time limit. Only entries whose time has come are looked at (a heap of due times on the steady
        clock; each is checked against its current state, so a stale due time does nothing)."""
        for entry_id in self.due.pop_due(self.steady()):
            t = self.live.get(entry_id)
            if t is None:
                continue
            if t.registering:  # its reply decides; look again shortly
                self._schedule_in(STOPS_CHECK_S, entry_id)
                continue
            if t.entry.state is EntryState.ADMITTED:
                if t.entry.registered_at is None:
                    if 0 < t.retry_at and (t.retry_at <= now or 0 < t.retry_due <= self.steady()):
                        self.start_register(t)
                elif not t.allocs:
                    waited = self._elapsed(t, t.entry.registered_at, now)
                    if waited >= self.admission_deadline_s:
                        self._refused(t, f"Nomad placed no allocation within {self.admission_deadline_s:g} s", now)
                    else:
                        self._schedule_in(self.admission_deadline_s - waited, entry_id)
                continue
            limit = t.spec.max_runtime if t.spec is not None else None
            if limit and t.entry.state is EntryState.RUNNING:
                ran = self._elapsed(t, t.running_since or t.entry.admitted_at or now, now)
                if ran >= limit:
                    self.end(t, EntryState.FAILED, f"timeout: still running after max_runtime ({limit:g} s)")
                    self.metrics.finished.labels("timeout").inc()
                else:
                    self._schedule_in(limit - ran, entry_id)
        steady_now = self.steady()
        if steady_now - self._stops_checked >= STOPS_CHECK_S:  # a query per cycle would cost more than it finds
            self._stops_checked = steady_now
            # a stop's next try is a stored wall time; after a step back, the wall clock as it would read
            # without the step decides (a step forward only makes a retry early, which does no harm)
            unstepped = max(now, self.started_at + (steady_now - self.started_steady))
            for s in self.store.stops(due_by=unstepped):
                self.start_stop(s.job_id, s.namespace)
