"""The contract: GPU accounting, sweep summaries and a team's bounded history (issue 31, item 4).

`usage_report` answers what the pure definition (`service/accounting.usage_rows`) answers over the whole
entries, before and after pruning and retention; a team's kept entries and bytes are bounded at `add`,
its oldest finished entries going first, live ones and those ``keep`` names never; `sweep_summaries`
counts each sweep's trials by state. Store-specific checks (the stored sizes, the folded rows, query
plans, migrations) stay beside each store in tests/store/.
"""

from __future__ import annotations

from nomad_gpu.service.accounting.report import GROUPINGS
from nomad_gpu.store import EntryState, QueueEntry, Store
from nomad_gpu.store.entries import dumps
from nomad_gpu.store.quota import TeamQuota
from tests.store.history_data import GPU, WINDOWS, answers, expected, got, history, job, spec


def test_the_usage_report_is_the_pure_definition(store: Store) -> None:
    history(store)
    for by in GROUPINGS:
        for since, until in WINDOWS:
            for team in (None, "vision", "nlp"):
                want = expected(store, by, since, until, 20000.0, team)
                assert got(store, by, since, until, 20000.0, team) == want, (by, since, until, team)
    assert got(store, "team", 0.0, 20000.0, 20000.0, "nobody") == []


def test_usage_is_the_same_before_and_after_pruning_and_retention(store: Store) -> None:
    history(store)
    before = answers(store)
    assert len(before[("team", 0.0, 20000.0, "nlp")]) == 1
    quota = TeamQuota(max_entries=100, max_stored_bytes=1 << 20, max_kept_entries=10, max_kept_bytes=1 << 20)
    store.add([job("nlp", 10000.0)], quota)  # nlp keeps 45 entries, may keep 10: its oldest finished go
    assert len(store.list(team="nlp")) <= 10
    after = answers(store)
    for key, rows in before.items():  # the new queued job adds one job to nlp's rows in the late windows
        if key[1] <= 10000.0 <= key[2] and key[3] != "vision":
            continue
        assert after[key] == rows, key
    assert store.purge_finished(before=50000.0) > 0
    assert answers(store) == after


def test_kept_entries_are_bounded_oldest_finished_first_and_live_never_pruned(store: Store) -> None:
    quota = TeamQuota(max_entries=50, max_stored_bytes=1 << 20, max_kept_entries=100, max_kept_bytes=1 << 20)
    live = store.add([job("nlp", 0.0) for _ in range(30)], quota)
    theirs = store.add([job("vision", 0.0) for _ in range(40)], quota)
    for round_ in range(8):  # 8 rounds of 20 submitted and cancelled: 190 entries submitted by nlp
        batch = store.add([job("nlp", 100.0 + round_) for _ in range(20)], quota)
        store.cancel_queued([e.id for e in batch], 200.0 + round_, "cancelled")
        kept = store.list(team="nlp")
        assert len(kept) <= 100
        assert {e.id for e in live} <= {e.id for e in kept}  # live entries are never pruned
    kept = store.list(team="nlp")
    finished = [e for e in kept if e.state is EntryState.CANCELLED]
    # what is kept of the finished is the newest: every round kept is later than every round pruned
    assert min(e.finished_at or 0 for e in finished) >= 200.0 + 8 - len(finished) / 20 - 1
    assert len(store.list(team="vision")) == len(theirs)  # another team's history is its own


def test_kept_bytes_are_bounded_and_what_queued_entries_wait_for_stays(store: Store) -> None:
    quota = TeamQuota(max_entries=50, max_stored_bytes=1 << 20, max_kept_entries=10_000, max_kept_bytes=40_000)
    first = store.add([job("nlp", 0.0)], quota)[0]
    store.transition(first.id, EntryState.CANCELLED, at=1.0, finished_at=1.0)
    for round_ in range(20):
        batch = store.add([job("nlp", 10.0 + round_) for _ in range(10)], quota, keep=lambda: {first.id})
        store.cancel_queued([e.id for e in batch], 20.0 + round_, "cancelled")
        kept = store.list(team="nlp")  # no sweeps here: each entry's stored bytes are its own
        size = sum(len(dumps(e.spec)) + len(dumps(list(e.history))) + len(dumps(list(e.placements))) for e in kept)
        assert size <= 40_000 + 5_000  # the bound, and at most one round's cancellations past it
    assert store.get(first.id).state is EntryState.CANCELLED  # the oldest, but a queued entry waits for it


def test_a_sweep_named_in_keep_stays(store: Store) -> None:
    quota = TeamQuota(max_entries=50, max_stored_bytes=1 << 20, max_kept_entries=5, max_kept_bytes=1 << 20)
    trials = store.add([QueueEntry(id="", name=f"hp-t{i}", team="nlp", priority=50, spec=spec("nlp"),
                                   submitted_at=1.0, sweep="hp-s1") for i in range(4)], quota)
    store.cancel_queued([t.id for t in trials], 2.0, "cancelled")
    for i in range(3):
        batch = store.add([job("nlp", 10.0 + i) for _ in range(2)], quota, keep=lambda: {"hp-s1"})
        store.cancel_queued([e.id for e in batch], 20.0 + i, "cancelled")
    assert [t.id for t in store.list(sweep="hp-s1")] == [t.id for t in trials]
    assert len(store.list(team="nlp")) < 4 + 6  # others were pruned instead
    store.add([job("nlp", 50.0)], quota)  # no longer kept: the oldest finished go first
    assert len(store.list(sweep="hp-s1")) < 4


def test_pruning_jobs_that_ran_and_ended_at_one_instant_keeps_each(store: Store) -> None:
    trials = store.add([QueueEntry(id="", name=f"hp-t{i}", team="nlp", priority=50, spec=spec("nlp"),
                                   submitted_at=10.0, sweep="hp-s1") for i in range(6)])
    for t in trials[:3]:
        store.transition(t.id, EntryState.ADMITTED, at=20.0, admitted_at=20.0, placements=(GPU,))
        store.transition(t.id, EntryState.CANCELLED, at=80.0, finished_at=80.0)
    store.cancel_queued([t.id for t in trials[3:]], 80.0, "cancelled")
    quota = TeamQuota(max_entries=100, max_stored_bytes=1 << 20, max_kept_entries=2, max_kept_bytes=1 << 20)
    store.add([job("vision", 90.0)], quota)
    store.add([job("nlp", 200.0)], quota)
    assert len(store.list(team="nlp")) <= 2
    report = got(store, "team", 0.0, 100.0, 100.0, "nlp")
    assert report == [{"key": "nlp", "gpu_hours": round(3 * 60 / 3600, 4), "jobs": 6, "attempts": 3,
                       "mean_wait_s": 10.0, "p95_wait_s": 10.0, "failures": 0, "preemptions": 0, "lost_gpu_hours": 0.0}]


def test_sweep_summaries_count_each_sweep_s_trials_by_state(store: Store) -> None:
    history(store)
    other = store.add([QueueEntry(id="", name=f"v-t{i}", team="vision", priority=50, spec=spec("vision"),
                                  submitted_at=3000.0 + i, sweep="v-s2") for i in range(3)])
    store.transition(other[1].id, EntryState.ADMITTED, at=3100.0, admitted_at=3100.0, placements=(GPU,))
    [nlp] = store.sweep_summaries("nlp")
    assert (nlp.id, nlp.first_name, nlp.team, nlp.states, nlp.submitted_at, nlp.trials) == (
        "hp-s1", "hp-t0", "nlp", {"cancelled": 40}, 2000.0, 40)
    [vision] = store.sweep_summaries("vision")
    assert (vision.id, vision.first_name, vision.states, vision.submitted_at) == (
        "v-s2", "v-t0", {"queued": 2, "admitted": 1}, 3000.0)
    assert sorted((s.id, s.team) for s in store.sweep_summaries()) == [("hp-s1", "nlp"), ("v-s2", "vision")]
    assert store.sweep_summaries("nobody") == []


def test_usage_intervals_are_the_held_intervals_of_every_attempt(store: Store) -> None:
    """`usage_intervals` answers each attempt's (team, GPU-equivalents, start, end) clipped to the window,
    as the pure definition (`accounting.held_intervals`) reads them from the entries."""
    from nomad_gpu.service.accounting.report import gpu_equivalents, held_intervals

    history(store)
    for since, until in WINDOWS:
        for team in (None, "vision", "nlp"):
            want = sorted((e.team, round(gpu_equivalents(e), 6), max(a, since), min(b, until))
                          for e in store.list() if team is None or e.team == team
                          for a, b in held_intervals(e, 20000.0) if min(b, until) > max(a, since))
            answer = sorted((t, round(g, 6), a, b) for t, g, a, b in store.usage_intervals(since, until, 20000.0,
                                                                                           team=team))
            assert answer == want, (since, until, team)
