"""The PostgreSQL store's schema and its migrations, numbered in a one-row table.

The same tables and columns as the SQLite file (store/schema.py), so that `nomad-gpu store copy` moves rows
column for column, plus what several writers on one database need: entry IDs and sweep numbers from
SEQUENCEs (never handed out twice, even by two replicas at one instant), and each sweep's counters in a
table written in the transaction that moves a trial (counters kept in one process's memory would miss
another replica's writes). Every version's statements run in one transaction under a transaction-level
advisory lock, so two services started at once on an empty database migrate it once.

Room for high availability: the leader lease (a row with an increasing epoch beside the session-level
advisory lock on `SERVICE_LOCK` that a service holds today) is one more migration here.
"""

from __future__ import annotations

import psycopg

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.store.schema import SchemaTooNew


class ForeignDatabase(InvalidRequest):
    """The database holds another application's tables under the names the store would make."""


MIGRATE_LOCK = 0x6E67_7075_0001
"""pg_advisory_xact_lock key held while the schema is brought forward ("ngpu" 1)."""
SERVICE_LOCK = 0x6E67_7075_0002
"""The session-level advisory lock a service holds on its database (one service per database, as the
SQLite file's lock), on a connection of its own. The leader lease of high availability replaces it: the
same lock, held by the leader only, plus a lease row with an increasing epoch."""

_V1 = """
CREATE SEQUENCE entry_seq;
CREATE TABLE entries (
  seq BIGINT PRIMARY KEY DEFAULT nextval('entry_seq'),
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  team TEXT NOT NULL,
  priority INTEGER NOT NULL,
  spec TEXT NOT NULL,
  submitted_at DOUBLE PRECISION NOT NULL,
  state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_retries INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  placements TEXT NOT NULL DEFAULT '[]',
  admitted_at DOUBLE PRECISION,
  finished_at DOUBLE PRECISION,
  sweep TEXT,
  idempotency_key TEXT UNIQUE,
  history TEXT NOT NULL DEFAULT '[]',
  job_prefix TEXT NOT NULL DEFAULT '',
  namespace TEXT NOT NULL DEFAULT 'default',
  registered_at DOUBLE PRECISION,
  refusals INTEGER NOT NULL DEFAULT 0,
  held INTEGER NOT NULL DEFAULT 0,
  spec_base TEXT
);
ALTER SEQUENCE entry_seq OWNED BY entries.seq;
CREATE INDEX entries_state ON entries(state);
CREATE INDEX entries_sweep ON entries(sweep);
CREATE INDEX entries_team ON entries(team, state);
CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE spec_bases (id TEXT PRIMARY KEY, spec TEXT NOT NULL);
CREATE TABLE stops (
  job_id TEXT NOT NULL,
  namespace TEXT NOT NULL,
  reason TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (job_id, namespace)
);
CREATE SEQUENCE sweep_seq;
CREATE TABLE sweep_counts (
  sweep TEXT PRIMARY KEY,
  team TEXT,
  total INTEGER NOT NULL,
  complete INTEGER NOT NULL,
  bad INTEGER NOT NULL,
  first_bad TEXT,
  first_bad_state TEXT
)
"""

MIGRATIONS: tuple[str, ...] = (_V1,)
VERSION = len(MIGRATIONS)


def migrate(db: psycopg.Connection[tuple[object, ...]]) -> int:
    """Bring the schema to VERSION (``db`` in autocommit); returns the version found. SchemaTooNew, and
    nothing written, for a database a newer release wrote."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = db.execute("SELECT version FROM schema_version").fetchone()
        found = 0 if row is None else int(str(row[0]))
        if row is None:
            taken = [t for t in ("entries", "kv", "stops", "spec_bases")
                     if db.execute("SELECT to_regclass(%s)", (t,)).fetchone() != (None,)]
            if taken:  # rolled back with the rest: nothing written
                raise ForeignDatabase(f"the queue database holds tables nomad-gpu did not make ({', '.join(taken)}): "
                                      "give nomad-gpu a database of its own")
        if found > VERSION:
            raise SchemaTooNew(f"the queue database has schema version {found}; this nomad-gpu knows up to "
                               f"{VERSION}")
        for version in range(found, VERSION):
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    db.execute(statement.encode())
        if row is None:
            db.execute("INSERT INTO schema_version (version) VALUES (%s)", (VERSION,))
        elif found != VERSION:
            db.execute("UPDATE schema_version SET version = %s", (VERSION,))
    return found
