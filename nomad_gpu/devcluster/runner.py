"""One timer thread for every "task" the dev cluster pretends to run.

Allocations start and finish on deadlines (duration / speed). A thread per allocation would not
scale to benchmark sizes and would make ordering hard to reason about, so all deadlines sit in one
heap served by one thread. The completion path matters for the service's measured handoff latency:
the thread sleeps on a condition variable until the earliest deadline (woken early when an earlier
one is added) and runs the due callbacks at once, outside its own lock.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class TimerHeap:
    """Run callbacks at wall-clock deadlines on a single daemon thread."""

    def __init__(self, clock: Callable[[], float] = time.time, name: str = "devcluster-timers") -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = itertools.count()  # FIFO among equal deadlines, and never compares callables
        self._condition = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self._name = name
        self._held_until = 0.0  # nothing runs before this (a leader election: election.py)

    def start(self) -> None:
        with self._condition:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._condition:
            self._running = False
            self._heap.clear()
            self._condition.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._thread = None

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        with self._condition:
            heapq.heappush(self._heap, (when, next(self._sequence), callback))
            if self._heap[0][2] is callback:
                self._condition.notify()

    def call_soon(self, callback: Callable[[], None]) -> None:
        self.call_at(self._clock(), callback)

    def hold_until(self, when: float) -> None:
        """Run nothing before `when` (math.inf: until called again); what comes due meanwhile runs then,
        in deadline order. 0 releases at once."""
        with self._condition:
            self._held_until = when
            self._condition.notify_all()

    def pending(self) -> int:
        with self._condition:
            return len(self._heap)

    def _loop(self) -> None:
        while True:
            with self._condition:
                due: list[Callable[[], None]] = []
                while self._running and not due:
                    if not self._heap:
                        self._condition.wait()
                        continue
                    delay = max(self._heap[0][0], self._held_until) - self._clock()
                    if delay == math.inf:
                        self._condition.wait()
                        continue
                    if delay > 0:
                        self._condition.wait(delay)
                        continue
                    now = self._clock()
                    while self._heap and self._heap[0][0] <= now:
                        due.append(heapq.heappop(self._heap)[2])
                if not self._running:
                    return
            for callback in due:
                try:
                    callback()
                except Exception:  # one broken callback must not stop every other task's clock
                    logger.exception("dev cluster timer callback failed")
