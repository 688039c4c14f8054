"""Idle reclaim's accounting: GPU-hours held idle, and GPU-hours returned by reclaim, per group.

The usage report (`GET /v1/usage`, `nomad-gpu report`) adds both to its rows. Idle time is measured by the
usage poller's rounds (an entry wholly idle in two rounds in a row was idle in between), so it is booked
in hourly buckets keyed by the entry's accounting keys (team, class, kind, model, user, sweep, as
store/usage.py reads them), each with the span it covers; a report sums the buckets inside its window (an
hour its edge cuts counts in proportion to the part of that span inside). A reclaim is kept as one
record: when, how many GPU-equivalents, and until when the job could otherwise have held them (its
`max_runtime`, else open: an idle session does not end by itself); the GPU-hours it returned in a window
are its GPU-equivalents times the part of that span in the window.

Kept in the store's meta (one JSON value, written after each round that changed it), so a restart loses
nothing; what is older than the retention is dropped.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from nomad_gpu.store.usage import UsageKeys

logger = logging.getLogger(__name__)

STORE_KEY = "idle_accounts"
HOUR = 3600.0
FIELDS = ("team", "class", "kind", "model", "user", "sweep")


@dataclass(frozen=True)
class IdleTotals:
    idle_gpu_hours: float = 0.0
    reclaimed_gpu_hours: float = 0.0
    reclaims: int = 0


def key_of(team: str, keys: UsageKeys) -> tuple[str, ...]:
    return (team, keys.job_class, keys.kind, keys.model, keys.user, keys.sweep)


class IdleAccounts:
    """Hourly idle buckets and reclaim records; `load`/`save` through the store's meta."""

    def __init__(self, load: Callable[[], str | None], save: Callable[[str], None], retention_s: float) -> None:
        self._save, self.retention_s = save, retention_s
        self.idle: dict[tuple[str, ...], dict[int, list[float]]] = {}  # key -> hour -> [GPU-s, first, last]
        self.reclaims: list[tuple[float, tuple[str, ...], float, float | None]] = []  # at, key, gpu_eq, until
        self._dirty = False
        raw = load()
        if raw:
            try:
                doc = json.loads(raw)
                for row in doc.get("idle", []):
                    self.idle.setdefault(tuple(row[0]), {})[int(row[1])] = [float(v) for v in row[2:5]]
                self.reclaims = [(float(at), tuple(key), float(eq), None if end is None else float(end))
                                 for at, key, eq, end in doc.get("reclaims", [])]
            except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a damaged value: start afresh
                logger.warning("idle accounts: the stored value is unreadable (%s); starting from none", exc)
                self.idle, self.reclaims = {}, []

    def add_idle(self, key: tuple[str, ...], gpu_equivalents: float, start: float, end: float) -> None:
        """`gpu_equivalents` held idle from `start` to `end`, booked into the hours they span."""
        t = start
        while t < end:
            hour = int(math.floor(t / HOUR))
            stop = min(end, (hour + 1) * HOUR)
            bucket = self.idle.setdefault(key, {}).setdefault(hour, [0.0, t, stop])
            bucket[0] += gpu_equivalents * (stop - t)
            bucket[1], bucket[2] = min(bucket[1], t), max(bucket[2], stop)
            t = stop
            self._dirty = True

    def add_reclaim(self, key: tuple[str, ...], at: float, gpu_equivalents: float, until: float | None) -> None:
        self.reclaims.append((at, key, gpu_equivalents, until))
        self._dirty = True

    def totals(self, by: str, since: float, until: float, team: str | None = None) -> dict[str, IdleTotals]:
        """Per value of `by`, over [since, until], only `team`'s if given."""
        column = FIELDS.index(by)
        idle: dict[str, float] = {}
        for key, buckets in self.idle.items():
            if team is not None and key[0] != team:
                continue
            for gpu_s, first, last in buckets.values():
                # an hour the window cuts counts in proportion to the part of its idle span inside
                share = _overlap(first, last, since, until) / (last - first) if last > first else 0.0
                if share > 0:
                    idle[key[column]] = idle.get(key[column], 0.0) + gpu_s * share
        returned: dict[str, float] = {}
        count: dict[str, int] = {}
        for at, key, eq, end in self.reclaims:
            if team is not None and key[0] != team:
                continue
            span = _overlap(at, until if end is None else min(end, until), since, until)
            if since <= at <= until:
                count[key[column]] = count.get(key[column], 0) + 1
            if span > 0:
                returned[key[column]] = returned.get(key[column], 0.0) + eq * span
        return {k: IdleTotals(round(idle.get(k, 0.0) / HOUR, 4), round(returned.get(k, 0.0) / HOUR, 4),
                              count.get(k, 0)) for k in idle.keys() | returned.keys() | count.keys()}

    def flush(self, now: float) -> None:
        """Write what changed (dropping what is older than the retention)."""
        if not self._dirty:
            return
        if self.retention_s > 0:
            oldest = int((now - self.retention_s) // HOUR)
            for buckets in self.idle.values():
                for hour in [h for h in buckets if h < oldest]:
                    del buckets[hour]
            self.reclaims = [r for r in self.reclaims if r[0] >= now - self.retention_s]
        doc = {"idle": [[list(k), h, *(round(x, 3) for x in v)] for k, b in sorted(self.idle.items())
                        for h, v in sorted(b.items())],
               "reclaims": [[at, list(k), eq, end] for at, k, eq, end in self.reclaims]}
        self._save(json.dumps(doc, separators=(",", ":")))
        self._dirty = False


def _overlap(a: float, b: float, since: float, until: float) -> float:
    return max(0.0, min(b, until) - max(a, since))
