"""The contract: stop intents, named values, retention, sweep counters, team limits and a full disk."""

from __future__ import annotations

import random
from typing import Any

import pytest

from nomad_gpu.domain.errors import NomadGpuError, OverLimit, Unavailable
from nomad_gpu.store import TRANSITIONS, EntryState, QueueEntry, Store
from nomad_gpu.store.contract import Admission, StopIntent, StoreFull, TeamQuota
from nomad_gpu.store.counts import SweepCount, recount
from tests.store.contract.conftest import StoreFactory, entry


def test_stop_intents_are_kept_until_done(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    store.add_stop(StopIntent("ngpu-b", "default", "cancelled", 1.0, 0, 4.0))
    store.add_stop(StopIntent("ngpu-a", "ml", "failed", 1.0, 0, 4.0))
    store.add_stop(StopIntent("ngpu-c", "default", "orphan", 1.0, 0, 2.0))
    store.add_stop(StopIntent("ngpu-c", "default", "again", 9.0, 0, 9.0))  # one intent per job: the first kept
    assert [(s.job_id, s.next_at) for s in store.stops()] == [("ngpu-c", 2.0), ("ngpu-a", 4.0), ("ngpu-b", 4.0)]
    assert store.stops()[0] == StopIntent("ngpu-c", "default", "orphan", 1.0, 0, 2.0)
    assert [s.job_id for s in store.stops(due_by=3.0)] == ["ngpu-c"]
    if store_factory.persistent:
        store = store_factory.reopen(store)
    store.stop_retry("ngpu-c", "default", next_at=10.0)
    assert [s.job_id for s in store.stops(due_by=5.0)] == ["ngpu-a", "ngpu-b"]
    assert store.stops()[-1] == StopIntent("ngpu-c", "default", "orphan", 1.0, 1, 10.0)
    store.stop_done("ngpu-a", "ml")
    store.stop_done("ngpu-a", "ml")  # twice: nothing happens
    store.stop_done("ngpu-b", "other")  # another namespace's job of that name: none
    assert [s.job_id for s in store.stops()] == ["ngpu-b", "ngpu-c"]


def test_named_values(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    assert store.get_meta("alive") is None
    store.set_meta("alive", '{"wall": 1}')
    store.set_meta("alive", '{"wall": 2}')
    store.set_meta("sweep_limits", "{}")
    if store_factory.persistent:
        store = store_factory.reopen(store)
    assert (store.get_meta("alive"), store.get_meta("sweep_limits")) == ('{"wall": 2}', "{}")


def test_retention_deletes_what_ended_before_and_never_lets_an_id_be_reused(store: Store) -> None:
    sweep = store.new_sweep_id("s")
    a, b, c, d = store.add([entry("a", sweep=sweep), entry("b", sweep=sweep), entry("c"), entry("d")])
    store.transition(a.id, EntryState.CANCELLED, finished_at=5.0)
    store.transition(b.id, EntryState.CANCELLED, finished_at=20.0)
    store.transition(d.id, EntryState.CANCELLED, finished_at=5.0)
    assert store.purge_finished(before=10.0) == 1  # a; b ended later, c is queued, d is the newest row
    assert [e.id for e in store.list()] == [b.id, c.id, d.id]
    with pytest.raises(NomadGpuError):
        store.get(a.id)
    assert store.sweep_count(sweep) == SweepCount("t", total=1, complete=0, bad=1,
                                                  first_bad=(b.id, EntryState.CANCELLED))
    assert store.add([entry("e")])[0].id == "q000005"
    assert store.purge_finished(before=100.0) == 2 and store.sweep_count(sweep) is None
    assert store.add([entry("f")])[0].id == "q000006"


def test_housekeeping_changes_nothing_a_read_sees(store: Store) -> None:
    stored = store.add([entry("a"), entry("b")])
    store.checkpoint()
    assert store.list() == stored


# ---- sweep counters ---------------------------------------------------------------------------------
def new(name: str, team: str, sweep: str | None) -> QueueEntry:
    return QueueEntry(id="", name=name, team=team, priority=50, spec={"name": name, "i": name}, submitted_at=0.0,
                      sweep=sweep)


def step(store: Store, rnd: random.Random, sweeps: set[str], now: float) -> None:
    """One of the store's writes, chosen at random: submissions, moves the table allows and refuses, a
    cycle's admissions (all or none), batch cancels and retention."""
    entries = store.list()
    ids = [e.id for e in entries]
    op = rnd.choice(["sweep", "single", "move", "move", "move", "admit", "cancel", "bad", "purge"])
    if op == "sweep" or not entries:
        sweep = store.new_sweep_id("s")
        sweeps.add(sweep)
        store.add([new(f"t{i}", rnd.choice(["a", "b"]), sweep) for i in range(rnd.randint(1, 6))])
    elif op == "single":
        store.add([new("one", "a", None)])
    elif op == "move":
        e = rnd.choice(entries)
        targets = sorted(TRANSITIONS[e.state], key=lambda s: s.value) or [e.state]
        to = rnd.choice(targets)
        fields: dict[str, Any] = {"finished_at": now} if to.is_terminal() else {}
        if to is EntryState.QUEUED:
            fields["placements"] = ()
        store.transition(e.id, to, expect=(e.state,), at=now, **fields)
    elif op == "admit":
        chosen = rnd.sample(ids, min(len(ids), rnd.randint(1, 3)))  # a non-queued one rolls all back
        try:
            store.admit_many([Admission(i, ({"node": "n"},)) for i in chosen], at=now)
        except NomadGpuError:
            pass
    elif op == "cancel":
        store.cancel_queued(rnd.sample(ids, min(len(ids), rnd.randint(1, 8))), now, "cancelled by user")
    elif op == "bad":
        e = rnd.choice(entries)
        wrong = [s for s in EntryState if s not in TRANSITIONS[e.state] and s is not e.state]
        with pytest.raises(NomadGpuError):
            store.transition(e.id, rnd.choice(wrong), expect=(e.state,), at=now)
    else:
        store.purge_finished(before=now - rnd.uniform(0, 20))


@pytest.mark.parametrize("seed", range(12))
def test_the_counters_equal_a_recount_after_any_sequence(store: Store, seed: int) -> None:
    """What `after:` a sweep is decided on (issue 31, item 8), without reading its trials."""
    rnd = random.Random(seed)
    sweeps: set[str] = set()
    for n in range(150):
        step(store, rnd, sweeps, float(n))
        expected = recount(store.list())
        assert {s: store.sweep_count(s) for s in sorted(sweeps)} == {s: expected.get(s) for s in sorted(sweeps)}, (
            f"after step {n}")


def test_the_counters_survive_a_restart(store_factory: StoreFactory) -> None:
    if not store_factory.persistent:
        pytest.skip("a database that is not kept has no restart")
    store = store_factory.open()
    sweep = store.new_sweep_id("s")
    trials = store.add([new(f"t{i}", "a", sweep) for i in range(4)])
    store.transition(trials[2].id, EntryState.CANCELLED, at=1.0, finished_at=1.0)
    store.cancel_queued([trials[1].id], 2.0, "cancelled by user")
    before = store.sweep_count(sweep)
    again = store_factory.reopen(store)
    assert again.sweep_count(sweep) == before == SweepCount("a", total=4, complete=0, bad=2,
                                                            first_bad=(trials[1].id, EntryState.CANCELLED))


# ---- what a team may hold ---------------------------------------------------------------------------
def test_a_team_holds_no_more_live_entries_than_its_limit(store: Store) -> None:
    quota = TeamQuota(max_entries=3, max_stored_bytes=1 << 20)
    a, _ = store.add([entry("a", team="x"), entry("b", team="x")], quota)
    with pytest.raises(OverLimit, match="max_entries"):
        store.add([entry("c", team="x"), entry("d", team="x")], quota)
    assert len(store.list(team="x")) == 2  # nothing of the refused submission stored
    store.add([entry("c", team="y"), entry("d", team="y"), entry("e", team="y")], quota)  # another team's own
    store.transition(a.id, EntryState.CANCELLED, finished_at=1.0)  # an ended entry is not held
    store.add([entry("c", team="x"), entry("d", team="x")], quota)
    assert store.add([entry("e", team="x")])[0].name == "e"  # no quota: no limit


def test_a_team_holds_no_more_stored_bytes_than_its_limit(store: Store) -> None:
    big = {"name": "a", "pad": "x" * 3000}
    quota = TeamQuota(max_entries=1000, max_stored_bytes=8000)
    store.add([entry("a", team="x", spec=big), entry("b", team="x", spec=big)], quota)
    with pytest.raises(OverLimit, match="max_stored_bytes"):
        store.add([entry("c", team="x", spec=big)], quota)
    assert len(store.list(team="x")) == 2
    sweep = store.new_sweep_id("hpo")  # a sweep's shared spec is counted once, not once per trial
    trials = [entry(f"t{i}", team="y", sweep=sweep, spec={**big, "i": i}) for i in range(20)]
    assert len(store.add(trials, quota)) == 20


# ---- a full disk ------------------------------------------------------------------------------------
def test_a_write_the_disk_cannot_hold_stores_nothing_and_space_returning_is_told(store_factory: StoreFactory) -> None:
    if store_factory.fill is None or store_factory.free is None:
        pytest.skip("this store's disk cannot be filled from a test")
    store = store_factory.open()
    returned: list[bool] = []
    store.space.listen(lambda: returned.append(True))
    (kept,) = store.add([entry("kept")])
    store_factory.fill(store)
    big = {"name": "big", "pad": "x" * 50_000}
    with pytest.raises(StoreFull) as refused:
        store.add([entry("big", spec=big, key="k")])
    assert isinstance(refused.value, Unavailable)  # a 503: retry later
    with pytest.raises(StoreFull):
        store.add([entry("big", spec=big, key="k")])
    assert [e.id for e in store.list()] == [kept.id] and returned == []
    store_factory.free(store)
    (stored,) = store.add([entry("big", spec=big, key="k")])  # the key was never taken
    assert stored.name == "big" and returned == [True]
    store.add([entry("next")])
    assert returned == [True]  # told once, when space returned
