"""A sweep's counters (issue 31, item 8: what `after:` a sweep is decided on, without reading its trials)
always equal a recount of the stored trials, after any sequence of the store's writes: submissions,
single moves along the transition table, a cycle's admissions (all or none), batch cancels (which move
rows without `_move`), moves the table refuses, and retention. Seeded random sequences, in memory."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.domain.errors import NomadGpuError
from nomad_gpu.store import TRANSITIONS, EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.counts import SweepCount, load_counts, recount
from nomad_gpu.store.sqlite import Admission


def new(name: str, team: str, sweep: str | None) -> QueueEntry:
    return QueueEntry(id="", name=name, team=team, priority=50, spec={"name": name, "i": name}, submitted_at=0.0,
                      sweep=sweep)


def counts_of(store: SqliteStore, sweeps: set[str]) -> dict[str, SweepCount | None]:
    return {s: store.sweep_count(s) for s in sorted(sweeps)}


def step(store: SqliteStore, rnd: random.Random, sweeps: set[str], now: float) -> None:
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
def test_the_counters_equal_a_recount_after_any_sequence(seed: int) -> None:
    rnd = random.Random(seed)
    store = SqliteStore()
    sweeps: set[str] = set()
    for n in range(150):
        step(store, rnd, sweeps, float(n))
        expected = recount(store.list())
        assert counts_of(store, sweeps) == {s: expected.get(s) for s in sorted(sweeps)}, f"after step {n}"
    assert load_counts(store._db) == recount(store.list())  # the start-up rebuild, from SQL


def test_a_count_says_what_the_dependency_check_needs() -> None:
    trials = [QueueEntry(id=f"q00000{i}", name="t", team="a", priority=50, spec={}, submitted_at=0.0,
                         sweep="s-s1", state=state)
              for i, state in enumerate([EntryState.COMPLETE, EntryState.RUNNING, EntryState.CANCELLED,
                                         EntryState.FAILED, EntryState.QUEUED], start=1)]
    count = recount(trials)["s-s1"]
    assert (count.team, count.total, count.complete, count.bad) == ("a", 5, 1, 2)
    assert count.first_bad == ("q000003", EntryState.CANCELLED)  # the first in submission order
    assert count.left == 4


def test_the_counters_are_rebuilt_from_the_rows_at_start_up(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    store = SqliteStore(path)
    sweep = store.new_sweep_id("s")
    trials = store.add([new(f"t{i}", "a", sweep) for i in range(4)])
    store.transition(trials[2].id, EntryState.CANCELLED, at=1.0, finished_at=1.0)
    store.cancel_queued([trials[1].id], 2.0, "cancelled by user")
    before = store.sweep_count(sweep)
    store.close()
    again = SqliteStore(path)
    assert again.sweep_count(sweep) == before == SweepCount("a", total=4, complete=0, bad=2,
                                                            first_bad=(trials[1].id, EntryState.CANCELLED))
    again.close()
