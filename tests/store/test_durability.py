"""Store guarantees the life cycle builds on: one writer, fsynced acks, migrations, all-or-nothing cycles,
and stop intents that survive a crash (issue: faults, items 4-8)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nomad_gpu.store import EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.entries import parse_job_id
from nomad_gpu.store.lock import StoreLocked
from nomad_gpu.store.schema import VERSION
from nomad_gpu.store.sqlite import Admission, StaleTransition, StopIntent

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


def test_job_ids_of_two_databases_never_collide(tmp_path: Path) -> None:
    a, b = SqliteStore(str(tmp_path / "a.db")), SqliteStore(str(tmp_path / "b.db"))
    ja, jb = a.add([entry()])[0].nomad_job_id, b.add([entry()])[0].nomad_job_id
    assert ja != jb
    ref = parse_job_id(ja)
    assert ref is not None and ref.instance == a.instance and ref.entry == "q000001"
    assert parse_job_id("ngpu-q000003-2") == parse_job_id("ngpu-q000003-2")
    assert parse_job_id("training") is None


def test_the_same_state_with_another_placement_is_refused() -> None:
    store = SqliteStore()
    (e,) = store.add([entry()])
    store.transition(e.id, EntryState.ADMITTED, placements=({"node": "n1"},))
    with pytest.raises(StaleTransition):  # a second service admitting it again elsewhere
        store.transition(e.id, EntryState.ADMITTED, placements=({"node": "n2"},))
    with pytest.raises(StaleTransition):
        store.transition(e.id, EntryState.RUNNING, expect=(EntryState.QUEUED,))


def test_a_cycle_admits_all_or_none() -> None:
    store = SqliteStore()
    a, b = store.add([entry("a"), entry("b")])
    store.transition(b.id, EntryState.CANCELLED)
    with pytest.raises(StaleTransition):
        store.admit_many([Admission(a.id, ({"node": "n1"},)), Admission(b.id, ({"node": "n1"},))], at=2.0)
    assert store.get(a.id).state is EntryState.QUEUED and store.get(a.id).placements == ()


def test_an_end_and_its_stop_intent_are_written_together(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    store = SqliteStore(path)
    (e,) = store.add([entry()])
    store.transition(e.id, EntryState.CANCELLED, stop=StopIntent(e.nomad_job_id, "default", "cancelled", 3.0, 0, 3.0))
    store.close()
    again = SqliteStore(path)
    assert [s.job_id for s in again.stops(due_by=3.0)] == [e.nomad_job_id]
    again.stop_retry(e.nomad_job_id, "default", next_at=10.0)
    assert again.stops(due_by=5.0) == [] and again.stops()[0].attempts == 1
    again.stop_done(e.nomad_job_id, "default")
    assert again.stops() == []


def test_retention_never_lets_an_id_be_reused() -> None:
    store = SqliteStore()
    a, b = store.add([entry("a"), entry("b")])
    for x in (a, b):
        store.transition(x.id, EntryState.CANCELLED, finished_at=5.0)
    assert store.purge_finished(before=10.0) == 1  # the newest row stays
    assert store.add([entry("c")])[0].id == "q000003"


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
