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

from nomad_gpu.service.accounting.report import GROUPINGS
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore
from nomad_gpu.store.entries import dumps
from nomad_gpu.store.quota import TeamQuota
from nomad_gpu.store.schema import MIGRATIONS, VERSION
from tests.store.history_data import GPU, SHARE, WINDOWS, expected, got, history, job, spec


def test_pruned_records_fold_and_stored_sizes_are_exact() -> None:
    """SQLite's own record of what the contract suite checks (tests/store/contract/test_contract_history.py):
    the 40 cancelled trials fold into one row, and each entry's `size` is its stored bytes."""
    store = SqliteStore()
    history(store)
    quota = TeamQuota(max_entries=100, max_stored_bytes=1 << 20, max_kept_entries=10, max_kept_bytes=1 << 20)
    store.add([job("nlp", 10000.0)], quota)
    assert store.purge_finished(before=50000.0) > 0
    folded = store._db.execute("SELECT COUNT(*), SUM(jobs) FROM usage_jobs WHERE entry_id IS NULL").fetchone()
    assert folded[1] >= 40 and folded[0] <= 7  # the 40 cancelled trials left one row (two more ran: preemption)
    actual = store._db.execute("SELECT SUM(LENGTH(spec) + LENGTH(history) + LENGTH(placements)) FROM entries"
                               " WHERE spec_base IS NULL").fetchone()[0]
    assert store._db.execute("SELECT SUM(size) FROM entries WHERE spec_base IS NULL").fetchone()[0] == actual


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
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == VERSION
    for by in GROUPINGS:
        for since, until in WINDOWS:
            assert got(store, by, since, until, 20000.0) == expected(store, by, since, until, 20000.0), (by, since)
    assert [(s.id, s.states) for s in store.sweep_summaries("nlp")] == [("hp-s1", {"cancelled": 3})]
    sizes = store._db.execute("SELECT id, size FROM entries ORDER BY seq").fetchall()
    assert all(size > 0 for _, size in sizes) and sizes[3][1] > sizes[4][1]  # the sweep's spec on its first
    store.close()


def test_a_version_4_database_gets_the_preempted_column(tmp_path: Path) -> None:
    """Schema 5: each usage attempt says whether it was preempted; a database of schema 4 is brought forward."""
    path = str(tmp_path / "q.db")
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE usage_attempts DROP COLUMN preempted")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    store = SqliteStore(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == VERSION == 5
    assert "preempted" in {row[1] for row in store._db.execute("PRAGMA table_info(usage_attempts)")}
    store.close()


def test_jobs_that_ran_and_ended_at_one_instant_keep_a_row_each() -> None:
    """Only jobs that never held a GPU are folded into one row (the report itself: the contract suite)."""
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
    rows = store._db.execute("SELECT attempts, jobs FROM usage_jobs WHERE team = 'nlp' AND entry_id IS NULL"
                             " ORDER BY attempts").fetchall()
    assert [tuple(r) for r in rows] == [(0, 3), (1, 1), (1, 1), (1, 1)]
