"""The database schema and its migrations, numbered by SQLite's `user_version`.

A database written by an older release is brought forward in place, one step per version, each in
its own transaction; a database from a newer release is refused rather than misread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from nomad_gpu.domain.errors import NomadGpuError
from nomad_gpu.store.usage import backfill


class SchemaTooNew(NomadGpuError):
    """The file was written by a newer nomad-gpu: refusing beats silently dropping its columns."""


_V1 = """
CREATE TABLE IF NOT EXISTS entries (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  team TEXT NOT NULL,
  priority INTEGER NOT NULL,
  spec TEXT NOT NULL,
  submitted_at REAL NOT NULL,
  state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_retries INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  placements TEXT NOT NULL DEFAULT '[]',
  admitted_at REAL,
  finished_at REAL,
  sweep TEXT,
  idempotency_key TEXT UNIQUE,
  history TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS entries_state ON entries(state);
CREATE INDEX IF NOT EXISTS entries_sweep ON entries(sweep);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# v2: per-database job ID prefix (entries of v1 keep ''), the entry's Nomad namespace, when Nomad
# acknowledged its register (so a restart never registers a job that already ran), how many attempts
# Nomad refused to place or a user re-queued (they do not use up retries), whether a user holds it, a
# sweep's spec stored once (`spec_bases`; each trial keeps its difference, store/specdiff.py), and stop
# intents that outlive a crash (a stop that failed, or was never sent, is retried after a restart)
_V2 = """
ALTER TABLE entries ADD COLUMN job_prefix TEXT NOT NULL DEFAULT '';
ALTER TABLE entries ADD COLUMN namespace TEXT NOT NULL DEFAULT 'default';
ALTER TABLE entries ADD COLUMN registered_at REAL;
ALTER TABLE entries ADD COLUMN refusals INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN spec_base TEXT;
CREATE TABLE IF NOT EXISTS spec_bases (id TEXT PRIMARY KEY, spec TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS stops (
  job_id TEXT NOT NULL,
  namespace TEXT NOT NULL,
  reason TEXT NOT NULL,
  created_at REAL NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_at REAL NOT NULL,
  PRIMARY KEY (job_id, namespace)
);
"""

# v3: a team's live entries counted and listed without reading other teams' rows
_V3 = """
CREATE INDEX IF NOT EXISTS entries_team ON entries(team, state);
"""

# v4: history that neither slows other teams nor grows without bound (issue 31, item 4). Each entry's stored
# bytes (`size`: its spec, history and placements, and a sweep's shared spec on its first trial), so a
# team's kept entries and bytes are counted on an index; a team's sweeps summed on an index without reading
# a spec; and GPU accounting's own compact record (store/usage.py), which outlives the entries it was read
# from, filled once here from the entries already stored.
_V4 = """
ALTER TABLE entries ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
UPDATE entries SET size = LENGTH(CAST(spec AS BLOB)) + LENGTH(CAST(history AS BLOB))
  + LENGTH(CAST(placements AS BLOB));
UPDATE entries SET size = size + (SELECT LENGTH(CAST(b.spec AS BLOB)) FROM spec_bases b WHERE b.id = entries.spec_base)
  WHERE seq IN (SELECT MIN(seq) FROM entries WHERE spec_base IS NOT NULL GROUP BY spec_base);
CREATE INDEX IF NOT EXISTS entries_team_size ON entries(team, state, size);
CREATE INDEX IF NOT EXISTS entries_team_sweep ON entries(team, sweep, state, submitted_at);
CREATE TABLE IF NOT EXISTS usage_jobs (
  id INTEGER PRIMARY KEY,
  entry_id TEXT UNIQUE,
  team TEXT NOT NULL,
  class TEXT NOT NULL,
  kind TEXT NOT NULL,
  model TEXT NOT NULL,
  user TEXT NOT NULL DEFAULT '-',
  sweep TEXT NOT NULL DEFAULT '-',
  gpu_eq REAL NOT NULL DEFAULT 0,
  submitted_at REAL NOT NULL,
  finished_at REAL,
  failed INTEGER NOT NULL DEFAULT 0,
  first_start REAL,
  attempts INTEGER NOT NULL DEFAULT 0,
  jobs INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS usage_jobs_team ON usage_jobs(team, finished_at);
CREATE UNIQUE INDEX IF NOT EXISTS usage_jobs_folded
  ON usage_jobs(team, class, kind, model, user, sweep, submitted_at, finished_at, failed)
  WHERE entry_id IS NULL AND attempts = 0;
CREATE TABLE IF NOT EXISTS usage_attempts (
  job INTEGER NOT NULL,
  start_at REAL NOT NULL,
  end_at REAL
);
CREATE INDEX IF NOT EXISTS usage_attempts_job ON usage_attempts(job, end_at);
"""


def _v4(db: sqlite3.Connection) -> None:
    _run(db, _V4)
    _v5(db)  # the backfill writes each attempt's `preempted`
    backfill(db)


def _v5(db: sqlite3.Connection) -> None:
    """Each attempt says whether it was preempted (its work lost: the usage report's lost GPU-hours)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(usage_attempts)")}
    if "preempted" not in columns:
        db.execute("ALTER TABLE usage_attempts ADD COLUMN preempted INTEGER NOT NULL DEFAULT 0")


Migration = str | Callable[[sqlite3.Connection], None]
"""SQL statements, or a step that also needs Python (reading the JSON the entries hold)."""

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _v4, _v5)
VERSION = len(MIGRATIONS)


def migrate(db: sqlite3.Connection) -> int:
    """Bring the schema to VERSION; returns the version the file had before."""
    found = int(db.execute("PRAGMA user_version").fetchone()[0])
    if found == 0 and db.execute("SELECT name FROM sqlite_master WHERE name='entries'").fetchone():
        found = 1  # written before versions were numbered
    if found > VERSION:
        raise SchemaTooNew(f"the queue database has schema version {found}; this nomad-gpu knows up to {VERSION}")
    for version in range(found, VERSION):
        db.execute("BEGIN IMMEDIATE")
        try:
            step = MIGRATIONS[version]
            if isinstance(step, str):
                _run(db, step)
            else:
                step(db)
            db.execute(f"PRAGMA user_version = {version + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return found


def _run(db: sqlite3.Connection, statements: str) -> None:
    for statement in statements.split(";"):
        if statement.strip():
            db.execute(statement)
