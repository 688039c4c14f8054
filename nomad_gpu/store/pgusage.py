"""GPU accounting's compact record (store/usage.py) on PostgreSQL: the same two tables, written in the
transaction of each move, and the same report.

What a job is counted under and which attempts a history shows are read by store/usage.py's pure
functions (`keys_of`, `held_intervals`); only the statements differ from SQLite's: `%s` parameters,
`GREATEST`/`LEAST` for SQLite's scalar MAX/MIN, a quoted `"user"` (a reserved word here), and an
attempt closed by its job (a job has at most one open attempt) rather than by SQLite's rowid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from nomad_gpu.store.entries import QueueEntry
from nomad_gpu.store.usage import (
    BACKFILL_ROWS,
    FAILED,
    GROUP_COLUMNS,
    HOLDING,
    PREEMPTING,
    REQUEUED,
    JobFacts,
    UsageTotals,
    held_attempts,
    held_intervals,
    keys_of,
    stored_facts,
)

Db = psycopg.Connection[tuple[Any, ...]]


_INSERT_JOB = (
    'INSERT INTO usage_jobs (entry_id, team, class, kind, model, "user", sweep, gpu_eq, submitted_at, finished_at,'
    " failed, first_start, attempts) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id")
_MOVE = (
    "WITH j AS (SELECT id, EXISTS (SELECT 1 FROM usage_attempts WHERE job = usage_jobs.id AND end_at IS NULL) AS"
    " open FROM usage_jobs WHERE entry_id = %(entry)s), opened AS (SELECT id FROM j WHERE %(opens)s AND NOT open),"
    " u AS (UPDATE usage_jobs SET class = %(class)s, kind = %(kind)s, model = %(model)s, gpu_eq = %(gpu_eq)s,"
    " finished_at = %(finished)s::float8, failed = %(failed)s, attempts = attempts + (SELECT COUNT(*) FROM"
    " opened), first_start = CASE WHEN EXISTS (SELECT 1 FROM opened) THEN COALESCE(first_start,"
    " %(at)s::float8) ELSE first_start END FROM j WHERE usage_jobs.id = j.id RETURNING usage_jobs.id),"
    " i AS (INSERT INTO usage_attempts (job, start_at, end_at) SELECT id, %(at)s::float8, NULL FROM opened),"
    " c AS (UPDATE usage_attempts SET end_at = %(at)s::float8, preempted = preempted * %(requeued)s FROM j WHERE"
    " %(closes)s AND usage_attempts.job = j.id AND usage_attempts.end_at IS NULL),"
    " p AS (UPDATE usage_attempts SET preempted = 1 FROM j WHERE %(preempting)s AND usage_attempts.job = j.id AND"
    " usage_attempts.end_at IS NULL) SELECT id FROM u")
"""A move in one round trip: the job's keys and end again, and an attempt opened (it now holds GPUs and had
none open) or closed (it no longer holds them; preempted only when queued again), or marked preempted; no row:
the job has no record yet."""


def _job_row(job: JobFacts, attempts: Sequence[tuple[float, float | None]]) -> tuple[Any, ...]:
    k = keys_of(job.spec, job.placements, job.sweep)
    return (job.entry_id, job.team, k.job_class, k.kind, k.model, k.user, k.sweep, k.gpu_equivalents,
            job.submitted_at, job.finished_at, int(job.state in FAILED), attempts[0][0] if attempts else None,
            len(attempts))


def record_new(db: Db, job: JobFacts, history: Iterable[Mapping[str, Any]] = ()) -> None:
    """A job's record, with the attempts its history shows (none for a new submission)."""
    attempts = held_attempts(history)
    row = db.execute(_INSERT_JOB, _job_row(job, [(start, end) for start, end, _ in attempts])).fetchone()
    if attempts and row is not None:
        db.cursor().executemany("INSERT INTO usage_attempts (job, start_at, end_at, preempted) VALUES (%s, %s, %s,"
                                " %s)", [(row[0], start, end, int(lost)) for start, end, lost in attempts])


def record_added(db: Db, jobs: Sequence[tuple[JobFacts, Iterable[Mapping[str, Any]]]]) -> None:
    """The records of a submission's new entries: those that held no GPU yet (every new submission) sent
    together (pipeline mode, as the entries themselves), any other one by one."""
    plain: list[tuple[Any, ...]] = []
    for job, history in jobs:
        attempts = held_intervals(history)
        if attempts:
            record_new(db, job, history)
        else:
            plain.append(_job_row(job, attempts))
    if len(plain) == 1:
        db.execute(_INSERT_JOB, plain[0])
    elif plain:
        db.cursor().executemany(_INSERT_JOB, plain)


def record_move(db: Db, job: JobFacts, at: object) -> None:
    """The job moved to ``job.state`` at ``at`` (store/usage.py's `record_move`, the same steps). A move
    without a time changes no attempt."""
    k = keys_of(job.spec, job.placements, job.sweep)
    timed = isinstance(at, int | float)
    args = {"entry": job.entry_id, "class": k.job_class, "kind": k.kind, "model": k.model,
            "gpu_eq": k.gpu_equivalents, "finished": job.finished_at, "failed": int(job.state in FAILED),
            "at": float(at) if isinstance(at, int | float) else None,
            "opens": timed and job.state in HOLDING, "closes": timed and job.state not in HOLDING,
            "requeued": int(job.state == REQUEUED), "preempting": timed and job.state == PREEMPTING}
    if db.execute(_MOVE, args).fetchone() is None:  # written before this record existed: start it now
        record_new(db, job)
        db.execute(_MOVE, args)


def record_ended(db: Db, entry_ids: Sequence[str], state: str, at: float) -> None:
    """Jobs ended without being read (queued trials cancelled in a batch): their end, and any open attempt."""
    db.execute("UPDATE usage_jobs SET finished_at=%s, failed=%s WHERE entry_id = ANY(%s)",
               (at, int(state in FAILED), list(entry_ids)))
    if state not in HOLDING:
        db.execute("UPDATE usage_attempts SET end_at=%s WHERE end_at IS NULL AND job IN (SELECT id FROM usage_jobs"
                   " WHERE entry_id = ANY(%s))", (at, list(entry_ids)))


def fold(db: Db, entry_ids: Sequence[str]) -> None:
    """The entries are being deleted: their records stay, untied; those that never held a GPU folded into one
    counted row per (team, keys, submitted, ended, failed), as store/usage.py's `fold`."""
    ids = list(entry_ids)
    db.execute(
        'INSERT INTO usage_jobs (entry_id, team, class, kind, model, "user", sweep, gpu_eq, submitted_at,'
        ' finished_at, failed, first_start, attempts, jobs) SELECT NULL, team, class, kind, model, "user", sweep,'
        " 0, submitted_at, finished_at, failed, NULL, 0, SUM(jobs) FROM usage_jobs WHERE entry_id = ANY(%s)"
        ' AND attempts = 0 AND finished_at IS NOT NULL GROUP BY team, class, kind, model, "user", sweep,'
        ' submitted_at, finished_at, failed ON CONFLICT (team, class, kind, model, "user", sweep, submitted_at,'
        " finished_at, failed) WHERE entry_id IS NULL AND attempts = 0 DO UPDATE SET jobs = usage_jobs.jobs +"
        " excluded.jobs", (ids,))
    db.execute("DELETE FROM usage_jobs WHERE entry_id = ANY(%s) AND attempts = 0 AND finished_at IS NOT NULL", (ids,))
    db.execute("UPDATE usage_jobs SET entry_id = NULL WHERE entry_id = ANY(%s)", (ids,))


def backfill(db: Db) -> None:
    """The records of a database written before they existed, read once from its entries (schema v2)."""
    def base_spec(base: str) -> str | None:
        found = db.execute("SELECT spec FROM spec_bases WHERE id = %s", (base,)).fetchone()
        return None if found is None else str(found[0])

    for facts, history in stored_facts(db.execute(BACKFILL_ROWS).fetchall(), base_spec):
        record_new(db, facts, history)


def report(db: Db, by: str, since: float, until: float, now: float, team: str | None = None) -> list[UsageTotals]:
    """The same rows as store/usage.py's `report`, in the same order."""
    column = '"user"' if by == "user" else GROUP_COLUMNS[by]  # KeyError for anything else: never request text
    scope = "team = %(team)s AND " if team is not None else ""
    jobs = (f"SELECT id, {column} AS key, gpu_eq, submitted_at, finished_at, failed, first_start, attempts, jobs"
            f" FROM usage_jobs WHERE {scope}submitted_at <= %(until)s AND (finished_at >= %(since)s OR"
            " (finished_at IS NULL AND %(now)s >= %(since)s))")
    args = {"team": team, "since": since, "until": until, "now": now}
    rows = db.execute(
        f"WITH j AS ({jobs}) SELECT key, SUM(jobs), SUM(attempts), SUM(CASE WHEN failed <> 0 AND finished_at BETWEEN"
        " %(since)s AND %(until)s THEN jobs ELSE 0 END), AVG(CASE WHEN first_start IS NOT NULL THEN GREATEST(0.0,"
        " first_start - submitted_at) END) FROM j GROUP BY key".encode(), args).fetchall()
    held = ("j.gpu_eq * GREATEST(0.0, LEAST(COALESCE(a.end_at, j.finished_at, %(now)s), %(until)s) -"
            " GREATEST(a.start_at, %(since)s))")
    taken = {r[0]: (r[1], r[2], r[3]) for r in db.execute(
        f"WITH j AS ({jobs}) SELECT j.key, SUM({held}), SUM(a.preempted), SUM(a.preempted * {held}) FROM j JOIN"
        " usage_attempts a ON a.job = j.id GROUP BY j.key".encode(), args).fetchall()}
    hours = {key: t[0] for key, t in taken.items()}
    p95 = {r[0]: r[1] for r in db.execute(
        f"WITH j AS ({jobs}), w AS (SELECT key, GREATEST(0.0, first_start - submitted_at) AS wait FROM j WHERE"
        " first_start IS NOT NULL), r AS (SELECT key, wait, ROW_NUMBER() OVER (PARTITION BY key ORDER BY wait)"
        " AS i, COUNT(*) OVER (PARTITION BY key) AS n FROM w) SELECT key, wait FROM r WHERE i = GREATEST(1,"
        " (95 * n + 99) / 100)".encode(), args).fetchall()}
    raw = {key: float(hours.get(key) or 0.0) / 3600 for key, *_ in rows}
    return [UsageTotals(key=str(key), gpu_hours=round(raw[key], 4), jobs=int(n), attempts=int(attempts),
                        mean_wait_s=None if mean is None else round(float(mean), 3),
                        p95_wait_s=None if key not in p95 else round(float(p95[key]), 3), failures=int(failures),
                        preemptions=int(taken.get(key, (0, 0, 0))[1] or 0),
                        lost_gpu_hours=round(float(taken.get(key, (0, 0, 0))[2] or 0.0) / 3600, 4))
            for key, n, attempts, failures, mean in sorted(rows, key=lambda r: (-raw[r[0]], r[0]))]


def facts(e: QueueEntry) -> JobFacts:
    return JobFacts(e.id, e.team, e.spec, e.placements, e.state.value, e.submitted_at, e.finished_at, e.sweep)


def intervals(db: Db, since: float, until: float, now: float,
              team: str | None = None) -> list[tuple[str, float, float, float]]:
    """The same as store/usage.py's `intervals`."""
    scope = "j.team = %(team)s AND " if team is not None else ""
    return [(str(t), float(g), float(a), float(b)) for t, g, a, b in db.execute(
        "SELECT j.team, j.gpu_eq, GREATEST(a.start_at, %(since)s), LEAST(COALESCE(a.end_at, j.finished_at,"
        f" %(now)s), %(until)s) FROM usage_attempts a JOIN usage_jobs j ON a.job = j.id WHERE {scope}j.team IS NOT"
        " NULL AND a.start_at <= %(until)s AND COALESCE(a.end_at, j.finished_at, %(now)s) >= %(since)s"
        " ORDER BY a.start_at".encode(), {"team": team, "since": since, "until": until, "now": now}).fetchall()
        if b > a]
