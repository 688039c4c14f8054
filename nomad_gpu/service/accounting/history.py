"""The service's own recent past: GPUs in use, queue depth and admissions per minute over 24 hours.

The dashboard draws these without an external time-series database. A sampler thread reads the
scheduler's status every few seconds and folds each reading into the bucket of its minute: the
peak GPU-equivalents in use and the peak queue depth seen in that minute, and the admissions
counted in it (the difference of the admitted counter). At most ``MINUTES`` buckets are kept, so
memory stays bounded however long the service runs; a minute with no reading (the service was
down, or the sampler stalled) is simply absent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

logger = logging.getLogger(__name__)

MINUTES = 24 * 60
"""Buckets kept: one per minute over 24 hours."""
SAMPLE_S = 5.0
"""How often the sampler reads the scheduler's status."""


@dataclass(frozen=True)
class Minute:
    """One minute of the service's life (``start`` is the minute's first second, epoch time)."""

    start: int
    gpus_in_use: float
    queued: int
    admitted: int

    def to_json(self) -> dict[str, Any]:
        return {"t": self.start, "gpus_in_use": round(self.gpus_in_use, 3), "queued": self.queued,
                "admitted": self.admitted}


class History:
    """Per-minute buckets, oldest first; thread-safe. Fed by :meth:`record` (or a :class:`HistorySampler`)."""

    def __init__(self, minutes: int = MINUTES) -> None:
        self._buckets: deque[Minute] = deque(maxlen=minutes)
        self._last_admitted: float | None = None
        self._lock = threading.Lock()

    def record(self, now: float, *, gpus_in_use: float, queued: int, admitted_total: float) -> None:
        """Fold one reading taken at ``now``; ``admitted_total`` is the service's running count of admissions."""
        minute = int(now // 60) * 60
        with self._lock:
            new = 0 if self._last_admitted is None else max(0, int(round(admitted_total - self._last_admitted)))
            self._last_admitted = admitted_total
            last = self._buckets[-1] if self._buckets else None
            if last is not None and minute < last.start:
                return  # a clock stepped back: keep the books in time order, drop the reading
            if last is not None and last.start == minute:
                self._buckets[-1] = replace(last, gpus_in_use=max(last.gpus_in_use, gpus_in_use),
                                            queued=max(last.queued, queued), admitted=last.admitted + new)
            else:
                self._buckets.append(Minute(minute, gpus_in_use, queued, new))

    def minutes(self, since: float | None = None) -> list[Minute]:
        with self._lock:
            return [m for m in self._buckets if since is None or m.start + 60 > since]

    def to_json(self, now: float) -> dict[str, Any]:
        """The last 24 hours as of ``now``, oldest first."""
        return {"step_s": 60, "window_s": 60 * MINUTES, "now": now,
                "minutes": [m.to_json() for m in self.minutes(since=now - 60 * MINUTES)]}


def reading(status: Mapping[str, Any]) -> tuple[float, int]:
    """GPU-equivalents in use and queue depth from the scheduler's status."""
    usage = status.get("team_usage_gpu")
    gpus = sum(float(v) for v in usage.values()) if isinstance(usage, Mapping) else 0.0
    return gpus, int(status.get("queued") or 0)


class HistorySampler:
    """A daemon thread that feeds ``history`` from ``status()`` and ``admitted()`` every ``interval_s``."""

    def __init__(self, history: History, status: Callable[[], Mapping[str, Any]], admitted: Callable[[], float],
                 *, interval_s: float = SAMPLE_S, clock: Callable[[], float] = time.time) -> None:
        self.history = history
        self._status = status
        self._admitted = admitted
        self.interval_s = interval_s
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        gpus, queued = reading(self._status())
        self.history.record(self.clock(), gpus_in_use=gpus, queued=queued, admitted_total=self._admitted())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                logger.exception("history sample failed")
            if self._stop.wait(self.interval_s):
                return
