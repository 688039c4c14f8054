"""GPU accounting over a window, from the queue's own records: Slurm's `sreport` for nomad-gpu.

Nomad's community edition keeps no GPU accounting, and an entry's live `usage` is utilisation, not
consumption. What was consumed is in the store: every attempt's admission and end are in the entry's
history, and what it held is its placements (GPU-equivalents, DESIGN 3.3). An attempt holds its GPUs
from admission (capacity is booked then, before Nomad starts it) until it leaves `admitted`/`running`;
its GPU-hours are its GPU-equivalents times that time, clipped to the window. Waits are from submission
to the first admission. Pure: entries and times in, rows out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nomad_gpu.api.payloads import UsageRow
from nomad_gpu.domain.modelnames import short_model
from nomad_gpu.domain.units import MigProfile, parent_slices_for_model
from nomad_gpu.render.spec import META_SWEEP, META_USER, SWEEP_CLASS
from nomad_gpu.store import QueueEntry

GROUPINGS = ("team", "class", "kind", "model", "user", "sweep")
HOLDING = ("admitted", "running")
FAILED = ("failed", "dependency-failed")
NONE = "-"


@dataclass(frozen=True)
class Window:
    since: float
    until: float

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, min(end, self.until) - max(start, self.since))


def held_intervals(entry: QueueEntry, now: float) -> list[tuple[float, float]]:
    """Each attempt's (admission, end) from the entry's history; a live attempt ends now."""
    out: list[tuple[float, float]] = []
    start: float | None = None
    for event in entry.history:
        at, to = event.get("at"), event.get("to")
        if not isinstance(at, int | float):
            continue
        if to in HOLDING:
            start = float(at) if start is None else start
        elif start is not None:
            out.append((start, float(at)))
            start = None
    if start is not None:
        out.append((start, entry.finished_at if entry.finished_at is not None else now))
    return out


def gpu_equivalents(entry: QueueEntry) -> float:
    """What one attempt holds: its placements' GPU-equivalents, else what its spec asks for."""
    placed = sum(float(p.get("gpu_equivalents") or 0.0) for p in entry.placements)
    if placed:
        return placed
    total = 0.0
    for group in entry.spec.get("groups") or []:
        n = int(group.get("count") or 1)
        if gpu := group.get("gpu"):
            total += n * int(gpu.get("count") or 1)
        elif mig := group.get("mig"):
            try:
                slices = MigProfile.parse(str(mig.get("profile"))).compute_slices
            except ValueError:
                continue
            total += n * int(mig.get("count") or 1) * slices / parent_slices_for_model("")
        elif share := group.get("share"):
            total += n * int(share.get("milli") or 0) / 1000
    return total


def key_of(entry: QueueEntry, by: str) -> str:
    """The entry's group under ``by``: its team, workload class, capacity kind, GPU model (short name), the
    user whose token submitted it (`api.tokens` `user:`) or its sweep."""
    if by == "team":
        return entry.team
    if by == "user":
        return str((entry.spec.get("meta") or {}).get(META_USER) or NONE)
    if by == "sweep":
        return entry.sweep or NONE
    groups: Sequence[Mapping[str, Any]] = entry.spec.get("groups") or []
    if by == "class":  # as the scheduler reads it (`_SpecBase.class_of`): a sweep's trials are `hpo` unless named
        named = entry.spec.get("class") or next((g.get("class") for g in groups if g.get("class")), None)
        sweep = entry.sweep or META_SWEEP in (entry.spec.get("meta") or {})
        return str(named or (SWEEP_CLASS if sweep else NONE))
    if by == "kind":
        if any(p.get("share_milli") for p in entry.placements):
            return "share"
        if any(" MIG " in str(p.get("device_name") or "") for p in entry.placements):
            return "mig"
        if any(p.get("instance_ids") for p in entry.placements):
            return "gpu"
        kinds = [k for g in groups for k in ("gpu", "mig", "share") if g.get(k)]
        return kinds[0] if kinds else ("cpu" if groups else NONE)
    for p in entry.placements:
        name = str(p.get("device_name") or "")
        if name:
            return short_model(name.split(" MIG ", 1)[0].rsplit("/", 1)[-1])
    models = [m for g in groups for m in ((g.get("gpu") or {}).get("models") or [])]
    return "/".join(sorted({short_model(str(m)) for m in models})) or NONE


def usage_rows(entries: Iterable[QueueEntry], window: Window, now: float, by: str) -> list[UsageRow]:
    """One row per group under ``by``, of the entries with any part of their life in the window, by key."""
    if by not in GROUPINGS:
        raise ValueError(f"by must be one of {', '.join(GROUPINGS)}, not {by!r}")
    hours: dict[str, float] = {}
    jobs: dict[str, int] = {}
    attempts: dict[str, int] = {}
    waits: dict[str, list[float]] = {}
    failures: dict[str, int] = {}
    for e in entries:
        end = e.finished_at if e.finished_at is not None else now
        if e.submitted_at > window.until or end < window.since:
            continue
        key = key_of(e, by)
        intervals = held_intervals(e, now)
        each = gpu_equivalents(e)
        hours[key] = hours.get(key, 0.0) + sum(each * window.overlap(s, t) for s, t in intervals) / 3600
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
                             failures=failures.get(key, 0)))
    return rows


def parse_since(text: str, now: float) -> float:
    """`30d`, `12h`, `90m`, `3600` (seconds) before ``now``, or an epoch time; ValueError otherwise."""
    raw = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    try:
        if raw and raw[-1] in units:
            ago = float(raw[:-1]) * units[raw[-1]]
        else:
            value = float(raw)
            return value if value > 1e9 else now - value  # an epoch time, or seconds ago
    except ValueError:
        raise ValueError(f"since must be like 30d, 12h, 90m or seconds, not {text!r}") from None
    if not math.isfinite(ago) or ago < 0:
        raise ValueError(f"since must be a positive duration, not {text!r}")
    return now - ago


__all__ = ["GROUPINGS", "Window", "held_intervals", "key_of", "parse_since", "usage_rows"]
