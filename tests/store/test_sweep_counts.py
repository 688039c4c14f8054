"""A sweep's counters (issue 31, item 8: what `after:` a sweep is decided on, without reading its trials):
what a count says, and SQLite's rebuild of them from its rows at start-up. That the counters kept as the
store writes equal a recount after any sequence of writes is the contract's
(tests/store/contract/test_contract_housekeeping.py), whose seeded sequences this reuses."""

from __future__ import annotations

import random

import pytest

from nomad_gpu.store import EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.counts import load_counts, recount
from tests.store.contract.test_contract_housekeeping import step


@pytest.mark.parametrize("seed", range(12))
def test_the_start_up_rebuild_from_sql_equals_a_recount(seed: int) -> None:
    """The counters as built from the rows at start-up (SQL), after any sequence of writes; the counters
    kept as writes commit are the contract's (tests/store/contract/)."""
    rnd = random.Random(seed)
    store = SqliteStore()
    sweeps: set[str] = set()
    for n in range(150):
        step(store, rnd, sweeps, float(n))
    assert load_counts(store._db) == recount(store.list())


def test_a_count_says_what_the_dependency_check_needs() -> None:
    trials = [QueueEntry(id=f"q00000{i}", name="t", team="a", priority=50, spec={}, submitted_at=0.0,
                         sweep="s-s1", state=state)
              for i, state in enumerate([EntryState.COMPLETE, EntryState.RUNNING, EntryState.CANCELLED,
                                         EntryState.FAILED, EntryState.QUEUED], start=1)]
    count = recount(trials)["s-s1"]
    assert (count.team, count.total, count.complete, count.bad) == ("a", 5, 1, 2)
    assert count.first_bad == ("q000003", EntryState.CANCELLED)  # the first in submission order
    assert count.left == 4
