"""What the life cycle does when time passes: register retries, the admission deadline, wall-time
limits and stops still to confirm.

Durations are measured on a steady (monotonic) clock: a wall-clock step of two hours is not two hours of
run. Times stored by an earlier process are read from the wall clock, less a step the owner measured while
the service was down (service/loops/scheduler.py, the heartbeat).

Each entry's next due time sits in a heap (`DueTimes`), so a cycle looks only at what is due rather
than at every live entry. This part only measures: a timer whose time came is a `TimerFired` event,
which the life cycle applies (service/life/machine.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from nomad_gpu.service.life.events import Timer, TimerFired
from nomad_gpu.service.life.tracking import DueTimes, Tracked
from nomad_gpu.store import EntryState

STOPS_CHECK_S = 0.5
"""How often stop intents are looked for (each failed stop already waits 0.5 s or more before its retry)."""


class Timers:
    def __init__(self, clock: Callable[[], float], live: dict[str, Tracked], admission_deadline_s: float) -> None:
        """``live``: the life cycle's admitted and running entries (read, never changed, here)."""
        self.clock, self.live, self.admission_deadline_s = clock, live, admission_deadline_s
        self.due = DueTimes()
        self.stops_checked = 0.0
        self.steady: Callable[[], float] = time.monotonic
        """The clock durations are measured on; the owner sets a fake one in tests."""
        self.started_at = float("-inf")
        """The wall time this process started: a time stored before it may carry a step made while it was down."""
        self.started_steady = 0.0
        """The steady clock's reading when this process started (with `started_at`)."""
        self.wall_step = 0.0
        """How far the wall clock moved beyond the measured downtime before this process started (0: unknown)."""

    def schedule(self, when: float, entry_id: str) -> None:
        """Look at the entry at ``when``, a wall time: kept on the steady clock, so a step moves nothing. A
        register retry (``when`` is the entry's ``retry_at``) remembers its steady due time too."""
        seconds = when - self.clock()
        t = self.live.get(entry_id)
        if t is not None and when == t.retry_at:
            t.retry_due = self.steady() + max(0.0, seconds)
        self.schedule_in(seconds, entry_id)

    def schedule_in(self, seconds: float, entry_id: str) -> None:
        self.due.add(self.steady() + max(0.0, seconds), entry_id, self.live, len(self.live))

    def elapsed(self, t: Tracked, since: float, now: float) -> float:
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

    def watch_deadline(self, t: Tracked) -> None:
        if t.entry.registered_at is not None:
            left = self.admission_deadline_s - self.elapsed(t, t.entry.registered_at, self.clock())
            self.schedule_in(left, t.entry.id)

    def watch_runtime(self, t: Tracked) -> None:
        limit = t.spec.max_runtime if t.spec is not None else None
        if limit:
            now = self.clock()
            self.schedule_in(limit - self.elapsed(t, t.running_since or t.entry.admitted_at or now, now), t.entry.id)

    def due_now(self) -> list[str]:
        return self.due.pop_due(self.steady())

    def fired(self, t: Tracked, now: float) -> TimerFired | None:
        """The timer of an entry whose due time came, if its time really came (else it is looked at again
        when it will have): a register retry, the admission deadline or the wall-time limit."""
        entry_id = t.entry.id
        if t.registering:  # its reply decides; look again shortly
            self.schedule_in(STOPS_CHECK_S, entry_id)
            return None
        if t.entry.state is EntryState.ADMITTED:
            if t.entry.registered_at is None:
                if 0 < t.retry_at and (t.retry_at <= now or 0 < t.retry_due <= self.steady()) and t.spec is not None:
                    return TimerFired(Timer.RETRY)
            elif not t.allocs:
                waited = self.elapsed(t, t.entry.registered_at, now)
                if waited >= self.admission_deadline_s:
                    why = f"Nomad placed no allocation within {self.admission_deadline_s:g} s"
                    return TimerFired(Timer.DEADLINE, why)
                self.schedule_in(self.admission_deadline_s - waited, entry_id)
            return None
        limit = t.spec.max_runtime if t.spec is not None else None
        if limit and t.entry.state is EntryState.RUNNING:
            ran = self.elapsed(t, t.running_since or t.entry.admitted_at or now, now)
            if ran >= limit:
                return TimerFired(Timer.RUNTIME, f"timeout: still running after max_runtime ({limit:g} s)")
            self.schedule_in(limit - ran, entry_id)
        return None

    def stops_due(self, now: float) -> float | None:
        """Every STOPS_CHECK_S: the wall time by which a stored stop's retry is due (None: not yet time to
        look). After a step back, the wall clock as it would read without the step decides (a step forward
        only makes a retry early, which does no harm)."""
        steady_now = self.steady()
        if steady_now - self.stops_checked < STOPS_CHECK_S:  # a query per cycle would cost more than it finds
            return None
        self.stops_checked = steady_now
        return max(now, self.started_at + (steady_now - self.started_steady))
