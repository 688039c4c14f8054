"""The queue store: atomic submissions, idempotency keys, the transition table, durability."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nomad_gpu.domain.errors import UnknownEntry
from nomad_gpu.store import TRANSITIONS, EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.sqlite import StaleTransition


def entry(name: str = "a", key: str | None = None) -> QueueEntry:
    return QueueEntry(id="", name=name, team="t", priority=50, spec={"name": name}, submitted_at=1.0,
                      idempotency_key=key)


def test_ids_are_assigned_in_order_and_survive_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    store = SqliteStore(path)
    stored = store.add([entry("a"), entry("b")])
    assert [e.id for e in stored] == ["q000001", "q000002"]
    store.close()
    again = SqliteStore(path)
    assert [e.name for e in again.list()] == ["a", "b"]
    assert again.add([entry("c")])[0].id == "q000003"


def test_wal_mode_on_disk(tmp_path: Path) -> None:
    SqliteStore(str(tmp_path / "q.db")).close()
    mode = sqlite3.connect(str(tmp_path / "q.db")).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_idempotency_key_returns_the_first_submission() -> None:
    store = SqliteStore()
    first = store.add([entry("a", key="k1")])
    second = store.add([entry("other", key="k1")])
    assert second[0].id == first[0].id and second[0].name == "a"
    assert len(store.list()) == 1


def test_a_failing_batch_stores_nothing() -> None:
    store = SqliteStore()
    store.add([entry("a", key="dup")])
    bad = QueueEntry(id="q000001", name="clash", team="t", priority=50, spec={}, submitted_at=0.0)
    with pytest.raises(sqlite3.IntegrityError):
        store.add([entry("b"), bad])
    assert [e.name for e in store.list()] == ["a"]


@pytest.mark.parametrize(("start", "to"), [
    pytest.param(s, t, id=f"{s.value}->{t.value}") for s in EntryState for t in EntryState if s is not t
])
def test_transitions_follow_the_table(start: EntryState, to: EntryState) -> None:
    store = SqliteStore()
    (e,) = store.add([entry()])
    path = {EntryState.QUEUED: [], EntryState.ADMITTED: [EntryState.ADMITTED],
            EntryState.RUNNING: [EntryState.ADMITTED, EntryState.RUNNING],
            EntryState.COMPLETE: [EntryState.ADMITTED, EntryState.COMPLETE],
            EntryState.FAILED: [EntryState.ADMITTED, EntryState.FAILED],
            EntryState.CANCELLED: [EntryState.CANCELLED],
            EntryState.DEPENDENCY_FAILED: [EntryState.DEPENDENCY_FAILED]}[start]
    for step in path:
        store.transition(e.id, step)
    if to in TRANSITIONS[start]:
        assert store.transition(e.id, to, reason="r").state is to
        assert store.get(e.id).history[-1]["to"] == to.value
    else:
        with pytest.raises(StaleTransition):
            store.transition(e.id, to)
        assert store.get(e.id).state is start


def test_terminal_states_have_no_way_out() -> None:
    for state in EntryState:
        assert state.is_terminal() == (not TRANSITIONS[state])


def test_unknown_entry() -> None:
    with pytest.raises(UnknownEntry):
        SqliteStore().get("q999999")


def test_nomad_job_id_is_derived_from_entry_and_attempt() -> None:
    e = QueueEntry(id="q000007", name="a", team="t", priority=50, spec={}, submitted_at=0.0)
    assert e.nomad_job_id == "ngpu-q000007"
    assert QueueEntry(**{**e.__dict__, "attempts": 2}).nomad_job_id == "ngpu-q000007-2"


def test_reasons_only_touch_queued_entries() -> None:
    store = SqliteStore()
    a, b = store.add([entry("a"), entry("b")])
    store.transition(b.id, EntryState.ADMITTED)
    store.set_reasons({a.id: "waiting", b.id: "should not stick"})
    assert store.get(a.id).reason == "waiting"
    assert store.get(b.id).reason == ""


def test_decoded_specs_are_kept_only_for_entries_in_flight() -> None:
    """An entry is read at every state move, so its decoded spec is kept; once it ends, it is not."""
    store = SqliteStore()
    a, b = store.add([entry("a"), entry("b")])
    store.transition(a.id, EntryState.ADMITTED, expect=(EntryState.QUEUED,), placements=())
    assert set(store._specs) == {a.id}
    moved = store.transition(a.id, EntryState.CANCELLED, expect=(EntryState.ADMITTED,))
    assert moved.spec == {"name": "a"} and a.id not in store._specs
    store.get(a.id)  # reads of ended entries (listings) do not fill it either
    assert a.id not in store._specs and store.get(b.id).spec == {"name": "b"}
