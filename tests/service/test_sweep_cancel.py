"""Cancelling a large sweep does not stall everyone else (issue 26, item 5): 10,000 trials cancelled one
durable commit at a time, all under the scheduler's lock, held it 15 s (another team's status: 12.4 s).
Counted here, not timed: the commits made and the trials moved while the lock is held once."""

from __future__ import annotations

import threading
from typing import Any, cast

from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore

TRIALS = 1200


class CountingLock:
    """The scheduler's lock, counting the store's commits made during each outermost hold."""

    def __init__(self, service: SchedulerService) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self.commits = 0
        self.holds: list[int] = []
        store = cast(SqliteStore, service.store)  # the SQLite store's commits, counted
        real = store._tx

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.commits += 1
            return real(*args, **kwargs)

        store._tx = counted  # type: ignore[method-assign]

    def __enter__(self) -> None:
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1:
            self._start = self.commits

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.holds.append(self.commits - self._start)
        self._lock.release()


def test_a_large_sweep_is_cancelled_in_batches_that_release_the_lock(service: SchedulerService) -> None:
    values = list(range(TRIALS))
    trials = service.submit({"kind": "sweep", "name": "big", "task": {"image": "i"},
                             "sweep": {"parameters": {"lr": values}}})
    lock = CountingLock(service)
    service._lock = lock  # type: ignore[assignment]
    service.life.lock = lock  # type: ignore[assignment]
    out = service.cancel_sweep(trials[0].sweep or "")
    assert len(out) == TRIALS and {e.state for e in out} == {EntryState.CANCELLED}
    assert lock.commits <= 10  # one durable commit per batch, not one per trial
    assert max(lock.holds) <= 2 and len(lock.holds) >= 3  # the lock is let go between batches
    assert service.life.waiting == {} and service.life.entries == {}
