"""GPU accounting's own record: one compact row per job and one per attempt, kept apart from the entries.

`GET /v1/usage` used to decode every team's entries (specs, placements, histories) to add up GPU-hours:
another team's history of cancelled sweeps made one team's report take 11.8 s (issue 31, item 4). The
report is now one SQL aggregate over these rows, filtered by team on an index. Each row holds only what
the report needs: the job's team, workload class, capacity kind and GPU model (its keys under ``by``),
its GPU-equivalents, when it was submitted and ended, whether it failed, its first admission (its wait),
and each attempt's admission and end. They are written in the same transaction as the entry's own move,
and outlive the entry: pruning or retention deletes the entry and keeps its GPU-hours. Jobs that never
held a GPU (a cancelled sweep's queued trials) are folded on pruning into one row per (keys, submitted,
ended, failed) with a count: 10,000 trials cancelled at one instant leave one row, and the same answers.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.jobmeta import META_SWEEP, META_USER, SWEEP_CLASS
from nomad_gpu.domain.modelnames import short_model
from nomad_gpu.domain.units import MigProfile, parent_slices_for_model
from nomad_gpu.store import specdiff

HOLDING = ("admitted", "running", "preempting")
PREEMPTING, REQUEUED = "preempting", "queued"
FAILED = ("failed", "dependency-failed")
NONE = "-"
GROUP_COLUMNS = {"team": "team", "class": "class", "kind": "kind", "model": "model", "user": "user", "sweep": "sweep"}
"""``by`` -> the column holding that key (a fixed map: no caller's text reaches the SQL)."""


@dataclass(frozen=True)
class UsageKeys:
    """What one job is counted under, and what one attempt of it holds."""

    job_class: str
    kind: str
    model: str
    gpu_equivalents: float
    user: str = NONE
    sweep: str = NONE


def keys_of(spec: Mapping[str, Any], placements: Sequence[Mapping[str, Any]], sweep: str | None = None) -> UsageKeys:
    """The job's class (a sweep's trial is `hpo` unless it names one, as the scheduler reads it), capacity
    kind and GPU model (short name), its GPU-equivalents (DESIGN 3.3), from its placements once it has any,
    else from what its spec asks for; the user whose token submitted it and its sweep."""
    # a stored spec a newer validator rejects is still recorded: read what has the expected shape, nothing else
    raw = spec.get("groups")
    groups: Sequence[Mapping[str, Any]] = [g for g in raw if isinstance(g, Mapping)] if isinstance(raw, list) else []
    written = spec.get("meta")
    meta: Mapping[str, Any] = written if isinstance(written, Mapping) else {}
    named = spec.get("class") or next((g.get("class") for g in groups if g.get("class")), None)
    trial = bool(sweep) or META_SWEEP in meta
    job_class = str(named or (SWEEP_CLASS if trial else NONE))
    return UsageKeys(job_class, _kind(groups, placements), _model(groups, placements),
                     _gpu_equivalents(groups, placements), str(meta.get(META_USER) or NONE), sweep or NONE)


def _kind(groups: Sequence[Mapping[str, Any]], placements: Sequence[Mapping[str, Any]]) -> str:
    if any(p.get("share_milli") for p in placements):
        return "share"
    if any(" MIG " in str(p.get("device_name") or "") for p in placements):
        return "mig"
    if any(p.get("instance_ids") for p in placements):
        return "gpu"
    kinds = [k for g in groups for k in ("gpu", "mig", "share") if g.get(k)]
    return kinds[0] if kinds else ("cpu" if groups else NONE)


def _model(groups: Sequence[Mapping[str, Any]], placements: Sequence[Mapping[str, Any]]) -> str:
    for p in placements:
        name = str(p.get("device_name") or "")
        if name:
            return short_model(name.split(" MIG ", 1)[0].rsplit("/", 1)[-1])
    models = [m for g in groups for m in ((g.get("gpu") or {}).get("models") or [])]
    return "/".join(sorted({short_model(str(m)) for m in models})) or NONE


def _gpu_equivalents(groups: Sequence[Mapping[str, Any]], placements: Sequence[Mapping[str, Any]]) -> float:
    placed = sum(float(p.get("gpu_equivalents") or 0.0) for p in placements)
    if placed:
        return placed
    total = 0.0
    for group in groups:
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


def held_intervals(history: Iterable[Mapping[str, Any]]) -> list[tuple[float, float | None]]:
    """Each attempt's (admission, end) from an entry's history; None: it still holds its GPUs."""
    return [(start, end) for start, end, _ in held_attempts(history)]


def held_attempts(history: Iterable[Mapping[str, Any]]) -> list[tuple[float, float | None, bool]]:
    """Each attempt's (admission, end, preempted): preempted when it was `preempting` and then queued again
    (its work lost; one that exited 0 in its grace completed instead)."""
    out: list[tuple[float, float | None, bool]] = []
    start: float | None = None
    preempting = False
    for event in history:
        at, to = event.get("at"), event.get("to")
        if not isinstance(at, int | float):
            continue
        if to in HOLDING:
            start = float(at) if start is None else start
            preempting = preempting or to == PREEMPTING
        elif start is not None:
            out.append((start, float(at), preempting and to == REQUEUED))
            start, preempting = None, False
    if start is not None:
        out.append((start, None, False))
    return out


@dataclass(frozen=True)
class JobFacts:
    """One entry as the usage record sees it."""

    entry_id: str
    team: str
    spec: Mapping[str, Any]
    placements: Sequence[Mapping[str, Any]]
    state: str
    submitted_at: float
    finished_at: float | None
    sweep: str | None = None


def record_new(db: sqlite3.Connection, job: JobFacts, history: Iterable[Mapping[str, Any]] = ()) -> None:
    """A job's record, with the attempts its history shows (none for a new submission)."""
    k = keys_of(job.spec, job.placements, job.sweep)
    attempts = held_attempts(history)
    cur = db.execute(
        "INSERT INTO usage_jobs (entry_id, team, class, kind, model, user, sweep, gpu_eq, submitted_at,"
        " finished_at, failed, first_start, attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (job.entry_id, job.team, k.job_class, k.kind, k.model, k.user, k.sweep, k.gpu_equivalents, job.submitted_at,
         job.finished_at, int(job.state in FAILED), attempts[0][0] if attempts else None, len(attempts)))
    if attempts:
        db.executemany("INSERT INTO usage_attempts (job, start_at, end_at, preempted) VALUES (?, ?, ?, ?)",
                       [(cur.lastrowid, start, end, int(lost)) for start, end, lost in attempts])


def record_move(db: sqlite3.Connection, job: JobFacts, at: object) -> None:
    """The job moved to ``job.state`` at ``at``: its keys and end again, and an attempt opened (it now holds
    GPUs and had none open) or closed (it no longer holds them). A move without a time changes no attempt,
    as in the history the record was first read from."""
    row = db.execute("SELECT id FROM usage_jobs WHERE entry_id = ?", (job.entry_id,)).fetchone()
    if row is None:  # written before this record existed, and not read into it: start it now
        record_new(db, job)
        row = db.execute("SELECT id FROM usage_jobs WHERE entry_id = ?", (job.entry_id,)).fetchone()
    k = keys_of(job.spec, job.placements, job.sweep)
    db.execute("UPDATE usage_jobs SET class=?, kind=?, model=?, gpu_eq=?, finished_at=?, failed=? WHERE id=?",
               (k.job_class, k.kind, k.model, k.gpu_equivalents, job.finished_at, int(job.state in FAILED), row[0]))
    if isinstance(at, int | float):
        _attempt_moved(db, row[0], job.state, float(at))


def record_ended(db: sqlite3.Connection, entry_id: str, state: str, at: float) -> None:
    """A job ended without being read (a queued trial cancelled in a batch): its end, and any open attempt."""
    db.execute("UPDATE usage_jobs SET finished_at=?, failed=? WHERE entry_id=?", (at, int(state in FAILED), entry_id))
    if state not in HOLDING:
        db.execute("UPDATE usage_attempts SET end_at=? WHERE end_at IS NULL AND job = (SELECT id FROM usage_jobs"
                   " WHERE entry_id = ?)", (at, entry_id))


def _attempt_moved(db: sqlite3.Connection, job: int, state: str, at: float) -> None:
    open_ = db.execute("SELECT rowid FROM usage_attempts WHERE job = ? AND end_at IS NULL", (job,)).fetchone()
    if state in HOLDING and open_ is None:
        db.execute("INSERT INTO usage_attempts (job, start_at, end_at) VALUES (?, ?, NULL)", (job, at))
        db.execute("UPDATE usage_jobs SET attempts = attempts + 1, first_start = COALESCE(first_start, ?)"
                   " WHERE id = ?", (at, job))
    elif state not in HOLDING and open_ is not None:  # preempted only if queued again, not if it completed
        db.execute("UPDATE usage_attempts SET end_at = ?, preempted = preempted * ? WHERE rowid = ?",
                   (at, int(state == REQUEUED), open_[0]))
    elif state == PREEMPTING and open_ is not None:
        db.execute("UPDATE usage_attempts SET preempted = 1 WHERE rowid = ?", (open_[0],))


def fold(db: sqlite3.Connection, entry_ids: Sequence[str]) -> None:
    """The entries are being deleted: their records stay, no longer tied to them; those that never held a
    GPU are folded into one counted row per (team, keys, submitted, ended, failed)."""
    for start in range(0, len(entry_ids), 500):
        chunk = list(entry_ids[start:start + 500])
        marks = ",".join("?" * len(chunk))
        db.execute(
            "INSERT INTO usage_jobs (entry_id, team, class, kind, model, user, sweep, gpu_eq, submitted_at,"
            " finished_at, failed, first_start, attempts, jobs) SELECT NULL, team, class, kind, model, user, sweep,"
            " 0, submitted_at, finished_at, failed, NULL, 0, SUM(jobs) FROM usage_jobs WHERE entry_id IN"
            f" ({marks}) AND attempts = 0 AND finished_at IS NOT NULL GROUP BY team, class, kind, model, user,"
            " sweep, submitted_at, finished_at, failed ON CONFLICT (team, class, kind, model, user, sweep,"
            " submitted_at, finished_at, failed) WHERE entry_id IS NULL AND attempts = 0 DO UPDATE SET jobs ="
            " jobs + excluded.jobs", chunk)
        db.execute(f"DELETE FROM usage_jobs WHERE entry_id IN ({marks}) AND attempts = 0 AND finished_at IS NOT NULL",
                   chunk)
        db.execute(f"UPDATE usage_jobs SET entry_id = NULL WHERE entry_id IN ({marks})", chunk)


BACKFILL_ROWS = ("SELECT id, team, spec, spec_base, placements, state, submitted_at, finished_at, history, sweep"
                 " FROM entries ORDER BY seq")
"""The entries a backfill reads, in the column order `stored_facts` expects (both stores)."""


def stored_facts(rows: Iterable[Sequence[Any]],
                 base_spec: Callable[[str], str | None]) -> Iterator[tuple[JobFacts, list[Any]]]:
    """Each stored entry of ``rows`` (`BACKFILL_ROWS`) as the record sees it, with its history; a sweep trial's
    spec applied to its sweep's shared one (``base_spec``: the stored JSON of a spec base, None when gone)."""
    bases: dict[str, Any] = {}
    for r in rows:
        spec = json.loads(r[2])
        if r[3]:
            if r[3] not in bases:
                found = base_spec(r[3])
                bases[r[3]] = json.loads(found) if found is not None else {}
            spec = specdiff.apply(bases[r[3]], spec)
        yield JobFacts(r[0], r[1], spec, json.loads(r[4]), r[5], r[6], r[7], r[9]), json.loads(r[8])


def backfill(db: sqlite3.Connection) -> None:
    """The records of a database written before they existed, read once from its entries (schema v4)."""
    def base_spec(base: str) -> str | None:
        found = db.execute("SELECT spec FROM spec_bases WHERE id = ?", (base,)).fetchone()
        return None if found is None else str(found[0])

    for facts, history in stored_facts(db.execute(BACKFILL_ROWS).fetchall(), base_spec):
        record_new(db, facts, history)


@dataclass(frozen=True)
class UsageTotals:
    """One group's figures over a window (rounded as the API shows them)."""

    key: str
    gpu_hours: float
    jobs: int
    attempts: int
    mean_wait_s: float | None
    p95_wait_s: float | None
    failures: int
    preemptions: int = 0
    lost_gpu_hours: float = 0.0


def report(db: sqlite3.Connection, by: str, since: float, until: float, now: float,
           team: str | None = None) -> list[UsageTotals]:
    """One row per group under ``by`` of the jobs with any part of their life in [since, until] (``team``'s
    only, read on its index), most GPU-hours first. An attempt still holding GPUs ends at its job's end,
    else ``now``; a wait is from submission to the first admission; p95 is the nearest rank."""
    column = GROUP_COLUMNS[by]  # KeyError for anything else: never text from a request
    scope = "team = :team AND " if team is not None else ""
    jobs = (f"SELECT id, {column} AS key, gpu_eq, submitted_at, finished_at, failed, first_start, attempts, jobs"
            f" FROM usage_jobs WHERE {scope}submitted_at <= :until AND (finished_at >= :since OR"
            " (finished_at IS NULL AND :now >= :since))")
    args = {"team": team, "since": since, "until": until, "now": now}
    rows = db.execute(
        f"WITH j AS ({jobs}) SELECT key, SUM(jobs), SUM(attempts), SUM(CASE WHEN failed AND finished_at BETWEEN"
        " :since AND :until THEN jobs ELSE 0 END), AVG(CASE WHEN first_start IS NOT NULL THEN MAX(0.0,"
        " first_start - submitted_at) END) FROM j GROUP BY key", args).fetchall()
    held = "j.gpu_eq * MAX(0.0, MIN(COALESCE(a.end_at, j.finished_at, :now), :until) - MAX(a.start_at, :since))"
    taken = {key: (hours, n, lost) for key, hours, n, lost in db.execute(
        f"WITH j AS ({jobs}) SELECT j.key, SUM({held}), SUM(a.preempted), SUM(a.preempted * {held}) FROM j JOIN"
        " usage_attempts a ON a.job = j.id GROUP BY j.key", args).fetchall()}
    hours = {key: t[0] for key, t in taken.items()}
    p95 = dict(db.execute(
        f"WITH j AS ({jobs}), w AS (SELECT key, MAX(0.0, first_start - submitted_at) AS wait FROM j WHERE"
        " first_start IS NOT NULL), r AS (SELECT key, wait, ROW_NUMBER() OVER (PARTITION BY key ORDER BY wait)"
        " AS i, COUNT(*) OVER (PARTITION BY key) AS n FROM w) SELECT key, wait FROM r WHERE i = MAX(1,"
        " (95 * n + 99) / 100)", args).fetchall())
    raw = {key: float(hours.get(key) or 0.0) / 3600 for key, *_ in rows}
    return [UsageTotals(key=str(key), gpu_hours=round(raw[key], 4), jobs=int(n), attempts=int(attempts),
                        mean_wait_s=None if mean is None else round(float(mean), 3),
                        p95_wait_s=None if key not in p95 else round(float(p95[key]), 3), failures=int(failures),
                        preemptions=int(taken.get(key, (0, 0, 0))[1] or 0),
                        lost_gpu_hours=round(float(taken.get(key, (0, 0, 0))[2] or 0.0) / 3600, 4))
            for key, n, attempts, failures, mean in sorted(rows, key=lambda r: (-raw[r[0]], r[0]))]


INTERVAL_COLUMNS = ("team", "gpu_eq", "start", "end")


def intervals(db: sqlite3.Connection, since: float, until: float, now: float,
              team: str | None = None) -> list[tuple[str, float, float, float]]:
    """Every attempt's (team, GPU-equivalents, start, end) clipped to [since, until]: what a team held over
    time, for figures that depend on how much it held at once (what it borrowed past its quota). Attempts
    of jobs folded into totals are gone from it, as their intervals are."""
    scope = "j.team = :team AND " if team is not None else ""
    return [(str(t), float(g), float(a), float(b)) for t, g, a, b in db.execute(
        "SELECT j.team, j.gpu_eq, MAX(a.start_at, :since), MIN(COALESCE(a.end_at, j.finished_at, :now), :until)"
        f" FROM usage_attempts a JOIN usage_jobs j ON a.job = j.id WHERE {scope}j.team IS NOT NULL AND"
        " a.start_at <= :until AND COALESCE(a.end_at, j.finished_at, :now) >= :since ORDER BY a.start_at",
        {"team": team, "since": since, "until": until, "now": now}).fetchall() if b > a]
