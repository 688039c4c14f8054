"""The contract: every state change is a compare-and-set along `TRANSITIONS`, a cycle's admissions are all
or none, and an end is written with the intent to stop its job."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.errors import UnknownEntry
from nomad_gpu.store import TRANSITIONS, EntryState, Store
from nomad_gpu.store.contract import Admission, StaleTransition, StopIntent
from tests.store.contract.conftest import StoreFactory, entry

PATH_TO = {EntryState.QUEUED: [], EntryState.ADMITTED: [EntryState.ADMITTED],
           EntryState.RUNNING: [EntryState.ADMITTED, EntryState.RUNNING],
           EntryState.COMPLETE: [EntryState.ADMITTED, EntryState.COMPLETE],
           EntryState.FAILED: [EntryState.ADMITTED, EntryState.FAILED],
           EntryState.CANCELLED: [EntryState.CANCELLED],
           EntryState.DEPENDENCY_FAILED: [EntryState.DEPENDENCY_FAILED],
           EntryState.PREEMPTING: [EntryState.ADMITTED, EntryState.RUNNING, EntryState.PREEMPTING]}


@pytest.mark.parametrize(("start", "to"), [
    pytest.param(s, t, id=f"{s.value}->{t.value}") for s in EntryState for t in EntryState if s is not t
])
def test_transitions_follow_the_table(store: Store, start: EntryState, to: EntryState) -> None:
    (e,) = store.add([entry()])
    for step in PATH_TO[start]:
        store.transition(e.id, step)
    if to in TRANSITIONS[start]:
        assert store.transition(e.id, to, reason="r").state is to
        assert store.get(e.id).history[-1]["to"] == to.value
    else:
        with pytest.raises(StaleTransition):
            store.transition(e.id, to)
        assert store.get(e.id).state is start


def test_a_move_from_a_stale_state_is_refused_and_writes_nothing(store: Store) -> None:
    (e,) = store.add([entry()])
    store.transition(e.id, EntryState.ADMITTED, expect=(EntryState.QUEUED,), placements=({"node": "n1"},))
    before = store.get(e.id)
    stop = StopIntent(e.nomad_job_id, "default", "cancelled", 3.0, 0, 3.0)
    with pytest.raises(StaleTransition):  # a cancel that read "queued" before the cycle admitted it
        store.transition(e.id, EntryState.CANCELLED, expect=(EntryState.QUEUED,), stop=stop, reason="late")
    assert store.get(e.id) == before
    assert store.stops() == []  # the intent is written with the move, or not at all
    with pytest.raises(UnknownEntry):
        store.transition("q999999", EntryState.CANCELLED, expect=(EntryState.QUEUED,))


def test_the_same_state_with_another_placement_is_refused(store: Store) -> None:
    (e,) = store.add([entry()])
    store.transition(e.id, EntryState.ADMITTED, placements=({"node": "n1"},))
    with pytest.raises(StaleTransition):  # a second service admitting it again elsewhere
        store.transition(e.id, EntryState.ADMITTED, placements=({"node": "n2"},))
    with pytest.raises(StaleTransition):
        store.transition(e.id, EntryState.RUNNING, expect=(EntryState.QUEUED,))
    again = store.transition(e.id, EntryState.ADMITTED, expect=(EntryState.ADMITTED,), placements=({"node": "n1"},),
                             priority=90)  # the same state, the same placement: a change of fields only
    assert again.state is EntryState.ADMITTED and store.get(e.id).priority == 90


def test_a_move_stores_its_fields_and_its_history(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    (e,) = store.add([entry()])
    store.transition(e.id, EntryState.ADMITTED, expect=(EntryState.QUEUED,), at=2.0, admitted_at=2.0, attempts=1,
                     placements=({"node": "n1", "gpus": [0]},), reason="")
    store.transition(e.id, EntryState.RUNNING, expect=(EntryState.ADMITTED,), at=3.0, registered_at=2.5,
                     durable=False)
    store.transition(e.id, EntryState.QUEUED, expect=(EntryState.RUNNING,), at=4.0, reason="lost", refusals=1,
                     placements=(), held=True, priority=10)
    if store_factory.persistent:
        store = store_factory.reopen(store)
    got = store.get(e.id)
    assert (got.state, got.attempts, got.refusals, got.held, got.priority, got.reason, got.placements,
            got.admitted_at, got.registered_at) == (EntryState.QUEUED, 1, 1, True, 10, "lost", (), 2.0, 2.5)
    assert [dict(h) for h in got.history] == [
        {"from": "queued", "to": "admitted", "at": 2.0, "reason": ""},
        {"from": "admitted", "to": "running", "at": 3.0, "reason": ""},
        {"from": "running", "to": "queued", "at": 4.0, "reason": "lost"}]
    for n in range(25):
        store.transition(e.id, EntryState.QUEUED, expect=(EntryState.QUEUED,), at=float(10 + n))
    history = store.get(e.id).history
    assert len(history) == 20 and history[-1]["at"] == 34.0 and history[0]["at"] == 15.0  # the newest 20


def test_a_cycle_admits_all_or_none(store: Store) -> None:
    sweep = store.new_sweep_id("s")
    a, b = store.add([entry("a", sweep=sweep), entry("b", sweep=sweep)])
    store.transition(b.id, EntryState.CANCELLED, finished_at=1.0)
    counted = store.sweep_count(sweep)
    with pytest.raises(StaleTransition):
        store.admit_many([Admission(a.id, ({"node": "n1"},)), Admission(b.id, ({"node": "n1"},))], at=2.0)
    assert store.get(a.id).state is EntryState.QUEUED and store.get(a.id).placements == ()
    with pytest.raises(UnknownEntry):
        store.admit_many([Admission(a.id, ({"node": "n1"},)), Admission("q999999", ())], at=2.0)
    assert store.get(a.id).state is EntryState.QUEUED and store.sweep_count(sweep) == counted


def test_a_cycles_admissions_are_stored(store: Store) -> None:
    a, b = store.add([entry("a"), entry("b")])
    store.set_reasons({a.id: "waiting", b.id: "waiting"})
    moved = store.admit_many([Admission(a.id, ({"node": "n1"},)), Admission(b.id, ({"node": "n2"},))], at=2.0)
    assert [m.id for m in moved] == [a.id, b.id]
    for m, node in zip(moved, ("n1", "n2"), strict=True):
        got = store.get(m.id)
        assert got == m
        assert (got.state, got.placements, got.admitted_at, got.reason) == (
            EntryState.ADMITTED, ({"node": node},), 2.0, "")
        assert dict(got.history[-1]) == {"from": "queued", "to": "admitted", "at": 2.0, "reason": ""}


def test_an_end_and_its_stop_intent_are_written_together(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    (e,) = store.add([entry()])
    store.transition(e.id, EntryState.CANCELLED, stop=StopIntent(e.nomad_job_id, "default", "cancelled", 3.0, 0, 3.0))
    if store_factory.persistent:
        store = store_factory.reopen(store)
    assert store.get(e.id).state is EntryState.CANCELLED
    assert [s.job_id for s in store.stops(due_by=3.0)] == [e.nomad_job_id]


def test_cancel_queued_moves_only_the_queued(store: Store) -> None:
    sweep = store.new_sweep_id("s")
    a, b, c = store.add([entry("a", sweep=sweep), entry("b", sweep=sweep), entry("c", sweep=sweep)])
    store.transition(b.id, EntryState.ADMITTED)
    moved = store.cancel_queued([a.id, b.id, c.id, "q999999"], 5.0, "cancelled by user")
    assert moved == {a.id, c.id}
    for x in (a, c):
        got = store.get(x.id)
        assert (got.state, got.finished_at, got.reason) == (EntryState.CANCELLED, 5.0, "cancelled by user")
        assert dict(got.history[-1]) == {"from": "queued", "to": "cancelled", "at": 5.0, "reason": "cancelled by user"}
    assert store.get(b.id).state is EntryState.ADMITTED
    count = store.sweep_count(sweep)
    assert count is not None and (count.total, count.bad, count.complete) == (3, 2, 0)
    assert store.cancel_queued([a.id], 6.0, "again") == set() and store.get(a.id).finished_at == 5.0


def test_a_register_is_marked_only_on_its_own_live_attempt(store: Store) -> None:
    (e,) = store.add([entry()])
    assert not store.mark_registered(e.id, 0, 1.0)  # queued: not sent to Nomad
    store.admit_many([Admission(e.id, ({"node": "n1"},))], at=2.0)
    assert not store.mark_registered(e.id, 1, 3.0)  # another attempt's acknowledgement
    assert store.get(e.id).registered_at is None
    assert store.mark_registered(e.id, 0, 3.0) and store.get(e.id).registered_at == 3.0
    store.transition(e.id, EntryState.CANCELLED, finished_at=4.0)
    assert not store.mark_registered(e.id, 0, 5.0) and store.get(e.id).registered_at == 3.0
    assert not store.mark_registered("q999999", 0, 5.0)


def test_reasons_only_touch_queued_entries(store: Store) -> None:
    a, b = store.add([entry("a"), entry("b")])
    store.transition(b.id, EntryState.ADMITTED)
    store.set_reasons({a.id: "waiting", b.id: "should not stick", "q999999": "nobody"})
    assert store.get(a.id).reason == "waiting"
    assert store.get(b.id).reason == ""
    assert len(store.get(a.id).history) == 0  # a reason is no move


def test_a_preempting_entry_is_listed_holds_its_stop_intent_and_comes_back_queued(store: Store) -> None:
    """Preemption (DESIGN 17): running -> preempting with the stop intent in the same write, its reason naming
    the preemptor (what a restart reads back), then queued as a new attempt that used no retry."""
    (e,) = store.add([entry()])
    store.transition(e.id, EntryState.ADMITTED, placements=({"node": "n1"},))
    store.transition(e.id, EntryState.RUNNING)
    stop = StopIntent(e.nomad_job_id, "default", "preempting", 3.0, 0, 3.0)
    reason = "preempting for q000009 (serving) on n1"
    moved = store.transition(e.id, EntryState.PREEMPTING, expect=(EntryState.RUNNING,), stop=stop, reason=reason)
    assert moved.state is EntryState.PREEMPTING and moved.state.holds_capacity()
    assert [s.job_id for s in store.stops()] == [e.nomad_job_id]
    assert [x.id for x in store.list([EntryState.PREEMPTING])] == [e.id]
    assert store.get(e.id).reason == reason
    back = store.transition(e.id, EntryState.QUEUED, expect=(EntryState.PREEMPTING,), attempts=1, placements=(),
                            refusals=1, reason="preempted by q000009 (serving) on n1")
    assert (back.state, back.attempts, back.retries_used) == (EntryState.QUEUED, 1, 0)
    assert [h["to"] for h in back.history][-2:] == ["preempting", "queued"]
