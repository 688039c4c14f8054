"""A team's history is bounded and its GPU accounting outlives it (issue 31, item 4).

Finished entries counted against no limit and were kept 30 days, and `GET /v1/usage` added up GPU-hours
by decoding every entry. Here: a team's kept entries and bytes are bounded, its oldest finished entries
pruned first and live ones never; the usage report is SQL over a compact record that gives the same
answers as the pure definition over whole entries (`service/accounting.usage_rows`), before and after
pruning, and for a database written before the record existed (migration v4).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.service.accounting import GROUPINGS, Window, usage_rows
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.entries import dumps
from nomad_gpu.store.quota import TeamQuota
from nomad_gpu.store.schema import MIGRATIONS

GPU = {"node": "n1", "instance_ids": ["GPU-1"], "gpu_equivalents": 1.0, "device_name": "nvidia/gpu/NVIDIA A100"}
MIG = {"node": "n2", "instance_ids": ["MIG-1"], "gpu_equivalents": 3 / 7, "device_name": "NVIDIA H100 MIG 3g.40gb"}
SHARE = {"node": "n3", "instance_ids": ["GPU-9/s0"], "gpu_equivalents": 0.25, "share_milli": 250,
         "device_name": "nvidia/gpu/NVIDIA L4"}


def spec(team: str, kind: str = "gpu", job_class: str | None = None) -> dict[str, Any]:
    asks: dict[str, dict[str, Any]] = {"gpu": {"gpu": {"count": 1, "models": ["A100"]}},
                                       "mig": {"mig": {"profile": "3g.40gb"}}, "share": {"share": {"milli": 250}},
                                       "cpu": {}}
    ask = asks[kind]
    out: dict[str, Any] = {"name": "j", "team": team, "groups": [{"name": "g", "count": 1, **ask}]}
    if job_class:
        out["class"] = job_class
    return out


def job(team: str, at: float, **spec_args: Any) -> QueueEntry:
    return QueueEntry(id="", name="j", team=team, priority=50, spec=spec(team, **spec_args), submitted_at=at)


def run(store: SqliteStore, e: QueueEntry, placement: dict[str, Any], start: float, end: float | None,
        final: EntryState = EntryState.COMPLETE, retry_at: float | None = None) -> None:
    """Admit ``e`` at ``start``; optionally fail it back to the queue at ``retry_at`` and admit it again;
    end it ``final`` at ``end`` (None: it still runs)."""
    store.transition(e.id, EntryState.ADMITTED, at=start, admitted_at=start, placements=(placement,))
    store.transition(e.id, EntryState.RUNNING, at=start + 5)
    if retry_at is not None:
        store.transition(e.id, EntryState.QUEUED, at=retry_at, placements=())
        store.transition(e.id, EntryState.ADMITTED, at=retry_at + 30, placements=(placement,))
    if end is not None:
        store.transition(e.id, final, at=end, finished_at=end)


def history(store: SqliteStore) -> None:
    """Two teams' past: jobs that ran on whole GPUs, MIG and shares, a retry, a failure, one still running,
    jobs cancelled while queued, and a sweep cancelled at once."""
    a = store.add([job("vision", 1000.0), job("vision", 1100.0, kind="mig", job_class="serving"),
                   job("nlp", 1200.0, kind="share", job_class="hpo"), job("nlp", 1300.0),
                   job("vision", 1400.0, kind="cpu"), job("nlp", 1500.0)])
    run(store, a[0], GPU, 1010.0, 4600.0)
    run(store, a[1], MIG, 1500.0, 9000.0, retry_at=3000.0)
    run(store, a[2], SHARE, 1200.0, 2000.0, final=EntryState.FAILED)
    run(store, a[3], GPU, 1400.0, None)
    store.transition(a[4].id, EntryState.CANCELLED, at=1450.0, finished_at=1450.0)
    trials = store.add([QueueEntry(id="", name=f"hp-t{i}", team="nlp", priority=50, spec=spec("nlp"),
                                   submitted_at=2000.0, sweep="hp-s1") for i in range(40)])
    store.cancel_queued([t.id for t in trials], 2500.0, "cancelled by user")


WINDOWS = [(0.0, 20000.0), (1200.0, 3000.0), (2600.0, 20000.0), (4600.0, 4601.0), (9000.0, 20000.0)]


def expected(store: SqliteStore, by: str, since: float, until: float, now: float,
             team: str | None = None) -> list[dict[str, Any]]:
    entries = [e for e in store.list() if team is None or e.team == team]
    return [r.to_json() for r in usage_rows(entries, Window(since, until), now, by)]


def got(store: SqliteStore, by: str, since: float, until: float, now: float,
        team: str | None = None) -> list[dict[str, Any]]:
    return [dict(vars(r)) for r in store.usage_report(by, since, until, now, team)]


def answers(store: SqliteStore, now: float = 20000.0) -> dict[tuple[str, float, float, str | None], Any]:
    return {(by, s, u, team): got(store, by, s, u, now, team)
            for by in GROUPINGS for s, u in WINDOWS for team in (None, "vision", "nlp")}


@pytest.mark.parametrize("by", GROUPINGS)
@pytest.mark.parametrize(("since", "until"), WINDOWS)
def test_the_sql_report_is_the_pure_definition(by: str, since: float, until: float) -> None:
    store = SqliteStore()
    history(store)
    for team in (None, "vision", "nlp"):
        assert got(store, by, since, until, 20000.0, team) == expected(store, by, since, until, 20000.0, team)


def test_usage_is_the_same_before_and_after_pruning_and_retention() -> None:
    store = SqliteStore()
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
    folded = store._db.execute("SELECT COUNT(*), SUM(jobs) FROM usage_jobs WHERE entry_id IS NULL").fetchone()
    assert folded[1] >= 40 and folded[0] <= 5  # the 40 cancelled trials left one row


def test_kept_entries_are_bounded_oldest_finished_first_and_live_never_pruned() -> None:
    store = SqliteStore()
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


def test_kept_bytes_are_bounded_and_what_queued_entries_wait_for_stays() -> None:
    store = SqliteStore()
    quota = TeamQuota(max_entries=50, max_stored_bytes=1 << 20, max_kept_entries=10_000, max_kept_bytes=40_000)
    first = store.add([job("nlp", 0.0)], quota)[0]
    store.transition(first.id, EntryState.CANCELLED, at=1.0, finished_at=1.0)
    for round_ in range(20):
        batch = store.add([job("nlp", 10.0 + round_) for _ in range(10)], quota, keep=lambda: {first.id})
        store.cancel_queued([e.id for e in batch], 20.0 + round_, "cancelled")
        size = store._db.execute("SELECT SUM(size) FROM entries WHERE team = 'nlp'").fetchone()[0]
        assert size <= 40_000 + 5_000  # the bound, and at most one round's cancellations past it
    assert store.get(first.id).state is EntryState.CANCELLED  # the oldest, but a queued entry waits for it
    actual = store._db.execute("SELECT SUM(LENGTH(spec) + LENGTH(history) + LENGTH(placements)) FROM entries"
                               " WHERE team = 'nlp'").fetchone()[0]
    assert store._db.execute("SELECT SUM(size) FROM entries WHERE team = 'nlp'").fetchone()[0] == actual


def test_a_team_s_sweeps_and_usage_read_its_index() -> None:
    """Every statement the two reads run, as SQLite plans it: a search on the team's index, no scan."""
    store = SqliteStore()
    history(store)
    traced: list[str] = []
    store._db.set_trace_callback(traced.append)  # the statements with their values written in
    store.sweep_summaries(team="nlp")
    store.usage_report("team", 0.0, 1.0, 1.0, team="nlp")
    store._db.set_trace_callback(None)
    plans = [str(r[3]) for sql in traced for r in store._db.execute(f"EXPLAIN QUERY PLAN {sql}")]
    scans = [p for p in plans if p.startswith("SCAN") and ("entries" in p or "usage_jobs" in p)]
    assert not scans, plans
    assert any("entries_team_sweep" in p for p in plans) and any("usage_jobs_team" in p for p in plans), plans


def v3_database(path: str) -> None:
    """A database as the release before the usage record wrote it: entries with histories and placements,
    and a sweep whose trials share a stored spec."""
    db = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:3]:
        assert isinstance(step, str)
        db.executescript(step)
    db.execute("PRAGMA user_version = 3")
    rows: list[tuple[str, str, dict[str, Any], str | None, list[dict[str, Any]], str, float, float | None,
                     list[dict[str, Any]]]] = [
        ("q000001", "vision", spec("vision"), None, [GPU], "complete", 1000.0, 4600.0,
         [{"from": "queued", "to": "admitted", "at": 1010.0}, {"from": "admitted", "to": "running", "at": 1015.0},
          {"from": "running", "to": "complete", "at": 4600.0}]),
        ("q000002", "nlp", spec("nlp", kind="share", job_class="hpo"), None, [SHARE], "failed", 1200.0, 2000.0,
         [{"from": "queued", "to": "admitted", "at": 1200.0}, {"from": "admitted", "to": "failed", "at": 2000.0}]),
        ("q000003", "nlp", spec("nlp"), None, [GPU], "running", 1300.0, None,
         [{"from": "queued", "to": "admitted", "at": 1400.0}]),
    ]
    base = spec("nlp", kind="mig")
    db.execute("INSERT INTO spec_bases (id, spec) VALUES ('hp-s1', ?)", (dumps(base),))
    rows += [(f"q00000{4 + i}", "nlp", {}, "hp-s1", [], "cancelled", 2000.0, 2500.0,
              [{"from": "queued", "to": "cancelled", "at": 2500.0}]) for i in range(3)]
    for entry_id, team, body, base_id, placements, state, submitted, finished, events in rows:
        db.execute("INSERT INTO entries (id, name, team, priority, spec, submitted_at, state, placements,"
                   " finished_at, sweep, history, spec_base) VALUES (?, 'j', ?, 50, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (entry_id, team, dumps(body), submitted, state, dumps(placements), finished, base_id,
                    json.dumps(events), base_id))
    db.close()


def test_a_database_of_the_last_release_gets_its_usage_record(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    v3_database(path)
    store = SqliteStore(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == 4
    for by in GROUPINGS:
        for since, until in WINDOWS:
            assert got(store, by, since, until, 20000.0) == expected(store, by, since, until, 20000.0), (by, since)
    assert [(s.id, s.states) for s in store.sweep_summaries("nlp")] == [("hp-s1", {"cancelled": 3})]
    sizes = store._db.execute("SELECT id, size FROM entries ORDER BY seq").fetchall()
    assert all(size > 0 for _, size in sizes) and sizes[3][1] > sizes[4][1]  # the sweep's spec on its first
    store.close()


def test_pruning_jobs_that_ran_and_ended_at_one_instant_keeps_each() -> None:
    """Trials of one sweep admitted and cancelled at the same instants: their records have equal keys and
    times, and each keeps its own row (only jobs that never held a GPU are folded into one)."""
    store = SqliteStore()
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
    rows = store._db.execute("SELECT attempts, jobs FROM usage_jobs WHERE team = 'nlp' AND entry_id IS NULL"
                             " ORDER BY attempts").fetchall()
    assert [tuple(r) for r in rows] == [(0, 3), (1, 1), (1, 1), (1, 1)]
    report = got(store, "team", 0.0, 100.0, 100.0, "nlp")
    assert report == [{"key": "nlp", "gpu_hours": round(3 * 60 / 3600, 4), "jobs": 6, "attempts": 3,
                       "mean_wait_s": 10.0, "p95_wait_s": 10.0, "failures": 0}]
