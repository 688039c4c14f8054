"""SQLite's part of the guarantees the life cycle builds on: one writer, fsynced acks, migrations (issue:
faults, items 4-8); all-or-nothing cycles and stop intents that survive a restart are the contract's
(tests/store/contract/)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nomad_gpu.store import EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.lock import StoreLocked
from nomad_gpu.store.schema import VERSION
from nomad_gpu.store.sqlite import Admission

V1_SCHEMA = """
CREATE TABLE entries (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, name TEXT NOT NULL,
  team TEXT NOT NULL, priority INTEGER NOT NULL, spec TEXT NOT NULL, submitted_at REAL NOT NULL, state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, max_retries INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '',
  placements TEXT NOT NULL DEFAULT '[]', admitted_at REAL, finished_at REAL, sweep TEXT,
  idempotency_key TEXT UNIQUE, history TEXT NOT NULL DEFAULT '[]');
CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO entries (id, name, team, priority, spec, submitted_at, state) VALUES ('q000001', 'old', 't', 50, '{}', 1,
  'running');
"""


def entry(name: str = "a") -> QueueEntry:
    return QueueEntry(id="", name=name, team="t", priority=50, spec={"name": name}, submitted_at=1.0)


def test_a_second_service_on_the_same_database_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    first = SqliteStore(path, exclusive=True)
    with pytest.raises(StoreLocked, match="one nomad-gpu service per database"):
        SqliteStore(path, exclusive=True)
    first.close()
    SqliteStore(path, exclusive=True).close()  # released with the first


def test_acknowledged_writes_are_fsynced(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "q.db"))
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_a_v1_database_is_migrated_and_keeps_its_job_ids(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.close()
    store = SqliteStore(path)
    (old,) = store.list()
    assert old.nomad_job_id == "ngpu-q000001" and old.namespace == "default"
    new = store.add([entry("new")])[0]
    assert new.nomad_job_id == f"ngpu-{store.instance}-q000002"
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == VERSION


def test_what_a_user_was_told_waits_for_the_disk_and_what_nomad_holds_need_not(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "q.db"))
    mode = lambda: store._db.execute("PRAGMA synchronous").fetchone()[0]  # noqa: E731
    (e,) = store.add([entry()])
    assert mode() == 2  # FULL: an acknowledged submission
    store.admit_many([Admission(e.id, ({"node": "n1"},))], at=2.0)
    assert mode() == 2  # FULL: Nomad will act on it
    store.transition(e.id, EntryState.RUNNING, durable=False)
    assert mode() == 1  # NORMAL: re-derived from Nomad's listing after a power loss
    store.transition(e.id, EntryState.CANCELLED)
    assert mode() == 2
