"""The SQLite store's own behaviour (its write-ahead log, its cache of decoded specs) and the pure parts of
entries; what any store must do is the contract suite's (tests/store/contract/)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nomad_gpu.store import TRANSITIONS, EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.contract import StaleTransition
from nomad_gpu.store.entries import JobRef, parse_job_id


def entry(name: str = "a", key: str | None = None) -> QueueEntry:
    return QueueEntry(id="", name=name, team="t", priority=50, spec={"name": name}, submitted_at=1.0,
                      idempotency_key=key)


def test_wal_mode_on_disk(tmp_path: Path) -> None:
    SqliteStore(str(tmp_path / "q.db")).close()
    mode = sqlite3.connect(str(tmp_path / "q.db")).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_terminal_states_have_no_way_out() -> None:
    for state in EntryState:
        assert state.is_terminal() == (not TRANSITIONS[state])


def test_nomad_job_id_is_derived_from_entry_and_attempt() -> None:
    e = QueueEntry(id="q000007", name="a", team="t", priority=50, spec={}, submitted_at=0.0)
    assert e.nomad_job_id == "ngpu-q000007"
    assert QueueEntry(**{**e.__dict__, "attempts": 2}).nomad_job_id == "ngpu-q000007-2"
    assert parse_job_id("ngpu-q000007-2") == JobRef("", "q000007", 2)
    assert parse_job_id("training") is None


def test_decoded_specs_are_kept_only_for_entries_in_flight() -> None:
    """An entry is read at every state move, so its decoded spec is kept; once it ends, it is not."""
    store = SqliteStore()
    a, b = store.add([entry("a"), entry("b")])
    store.transition(a.id, EntryState.ADMITTED, expect=(EntryState.QUEUED,), placements=())
    assert set(store._rows.specs) == {a.id}
    moved = store.transition(a.id, EntryState.CANCELLED, expect=(EntryState.ADMITTED,))
    assert moved.spec == {"name": "a"} and a.id not in store._rows.specs
    store.get(a.id)  # reads of ended entries (listings) do not fill it either
    assert a.id not in store._rows.specs and store.get(b.id).spec == {"name": "b"}


def test_a_batch_cancel_is_checked_against_the_same_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cancel_queued` writes its batch without `_move`, but not around `TRANSITIONS`: a table without
    queued -> cancelled refuses it and moves nothing."""
    store = SqliteStore()
    (e,) = store.add([entry()])
    table = {**TRANSITIONS, EntryState.QUEUED: TRANSITIONS[EntryState.QUEUED] - {EntryState.CANCELLED}}
    monkeypatch.setattr("nomad_gpu.store.sqlite.TRANSITIONS", table)
    with pytest.raises(StaleTransition):
        store.cancel_queued([e.id], 2.0, "cancelled by user")
    assert store.get(e.id).state is EntryState.QUEUED
