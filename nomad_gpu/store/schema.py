"""The database schema and its migrations, numbered by SQLite's `user_version`.

A database written by an older release is brought forward in place, one step per version, each in
its own transaction; a database from a newer release is refused rather than misread.
"""

from __future__ import annotations

import sqlite3

from nomad_gpu.domain.errors import NomadGpuError


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

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
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
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {version + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return found
