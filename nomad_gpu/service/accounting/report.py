"""GPU accounting over a window, from the queue's own records: Slurm's `sreport` for nomad-gpu.

Nomad's community edition keeps no GPU accounting, and an entry's live `usage` is utilisation, not
consumption. What was consumed is in the store: every attempt's admission and end are in the entry's
history, and what it held is its placements (GPU-equivalents, DESIGN 3.3). An attempt holds its GPUs
from admission (capacity is booked then, before Nomad starts it) until it leaves `admitted`/`running`;
its GPU-hours are its GPU-equivalents times that time, clipped to the window. Waits are from submission
to the first admission. Pure: entries and times in, rows out.

`usage_rows` is the definition over whole entries; `GET /v1/usage` answers the same from the store's
compact usage record in SQL (`nomad_gpu.store.usage.report`, tested equal to it), so that a report never
decodes an entry and survives the entries' pruning. `parse_since` reads the window's start.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nomad_gpu.api.payloads import UsageRow
from nomad_gpu.store import QueueEntry, usage

GROUPINGS = ("team", "class", "kind", "model", "user", "sweep")
FAILED = usage.FAILED


@dataclass(frozen=True)
class Window:
    since: float
    until: float

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, min(end, self.until) - max(start, self.since))


def held_intervals(entry: QueueEntry, now: float) -> list[tuple[float, float]]:
    """Each attempt's (admission, end) from the entry's history; a live attempt ends now."""
    return [(start, stop) for start, stop, _ in held_attempts(entry, now)]


def held_attempts(entry: QueueEntry, now: float) -> list[tuple[float, float, bool]]:
    """Each attempt's (admission, end, preempted); a live attempt ends now."""
    end = entry.finished_at if entry.finished_at is not None else now
    return [(start, stop if stop is not None else end, lost)
            for start, stop, lost in usage.held_attempts(entry.history)]


def gpu_equivalents(entry: QueueEntry) -> float:
    """What one attempt holds: its placements' GPU-equivalents, else what its spec asks for."""
    return usage.keys_of(entry.spec, entry.placements).gpu_equivalents


def key_of(entry: QueueEntry, by: str) -> str:
    """The entry's group under ``by``: its team, workload class, capacity kind, GPU model (short name), the
    user whose token submitted it (`api.tokens` `user:`) or its sweep."""
    if by == "team":
        return entry.team
    keys = usage.keys_of(entry.spec, entry.placements, entry.sweep)
    return {"class": keys.job_class, "kind": keys.kind, "user": keys.user, "sweep": keys.sweep}.get(by, keys.model)


def usage_rows(entries: Iterable[QueueEntry], window: Window, now: float, by: str) -> list[UsageRow]:
    """One row per group under ``by``, of the entries with any part of their life in the window, by key."""
    if by not in GROUPINGS:
        raise ValueError(f"by must be one of {', '.join(GROUPINGS)}, not {by!r}")
    hours: dict[str, float] = {}
    jobs: dict[str, int] = {}
    attempts: dict[str, int] = {}
    waits: dict[str, list[float]] = {}
    failures: dict[str, int] = {}
    preempted: dict[str, int] = {}
    lost: dict[str, float] = {}
    for e in entries:
        end = e.finished_at if e.finished_at is not None else now
        if e.submitted_at > window.until or end < window.since:
            continue
        key = key_of(e, by)
        attempts_of = held_attempts(e, now)
        intervals = [(s, t) for s, t, _ in attempts_of]
        each = gpu_equivalents(e)
        hours[key] = hours.get(key, 0.0) + sum(each * window.overlap(s, t) for s, t in intervals) / 3600
        taken = [(s, t) for s, t, was in attempts_of if was]
        if taken:
            preempted[key] = preempted.get(key, 0) + len(taken)
            lost[key] = lost.get(key, 0.0) + sum(each * window.overlap(s, t) for s, t in taken)
        jobs[key] = jobs.get(key, 0) + 1
        attempts[key] = attempts.get(key, 0) + len(intervals)
        if intervals:
            waits.setdefault(key, []).append(max(0.0, intervals[0][0] - e.submitted_at))
        if e.state.value in FAILED and e.finished_at is not None and window.since <= e.finished_at <= window.until:
            failures[key] = failures.get(key, 0) + 1
    rows = []
    for key in sorted(jobs, key=lambda k: (-hours.get(k, 0.0), k)):
        w = sorted(waits.get(key, []))
        rows.append(UsageRow(key=key, gpu_hours=round(hours.get(key, 0.0), 4), jobs=jobs[key],
                             attempts=attempts.get(key, 0),
                             mean_wait_s=round(sum(w) / len(w), 3) if w else None,
                             p95_wait_s=round(w[max(0, math.ceil(0.95 * len(w)) - 1)], 3) if w else None,
                             failures=failures.get(key, 0), preemptions=preempted.get(key, 0),
                             lost_gpu_hours=round(lost.get(key, 0.0) / 3600, 4)))
    return rows


def parse_since(text: str, now: float) -> float:
    """`30d`, `12h`, `90m`, `3600` (seconds) before ``now``, or an epoch time; ValueError otherwise, and for
    a time that is no time (nan, inf, past a float's range), a negative one, or one after ``now``."""
    raw = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    try:
        if raw and raw[-1] in units:
            number, epoch = float(raw[:-1]) * units[raw[-1]], False
        else:
            number = float(raw)
            epoch = number > 1e9  # an epoch time, or seconds ago
    except ValueError:
        raise ValueError(f"since must be like 30d, 12h, 90m or seconds, not {text!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"since must be a finite time that is not negative, not {text!r}")
    since = number if epoch else now - number
    if since > now:
        raise ValueError(f"since ({since:.0f}) is after until ({now:.0f}): ask for a time in the past")
    return since


__all__ = ["GROUPINGS", "Window", "borrowed_hours", "held_attempts", "held_intervals", "key_of", "parse_since",
           "usage_rows"]


def borrowed_hours(intervals: Iterable[tuple[str, float, float, float]],
                   quotas: Mapping[str, float]) -> dict[str, float]:
    """Per team with a quota: the integral over time of max(0, held - quota), in GPU-hours: what it held past
    its quota, on capacity its cohort lent (borrowed = in use - quota, as at every moment of the cycle)."""
    edges: dict[str, list[tuple[float, float]]] = {}
    for team, gpus, start, end in intervals:
        if team in quotas and end > start:
            edges.setdefault(team, []).extend(((start, gpus), (end, -gpus)))
    out: dict[str, float] = {}
    for team, points in edges.items():
        points.sort()
        held, last, total = 0.0, points[0][0], 0.0
        for at, delta in points:
            total += max(0.0, held - quotas[team]) * (at - last)
            held, last = held + delta, at
        out[team] = round(total / 3600, 4)
    return out
