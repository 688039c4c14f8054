"""The PostgreSQL store's own side of the bounded history and the usage record (the behaviour itself is in
tests/store/contract/test_contract_history.py): each entry's `size` is its stored bytes, cancelled trials
that never held a GPU fold into one row when pruned, two replicas pruning one team at once never break
its bound, and a database of schema v1 (before the record) gets its record from its entries."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest

from nomad_gpu.service.accounting.report import GROUPINGS
from nomad_gpu.store import EntryState, QueueEntry, Store, open_store
from nomad_gpu.store.entries import dumps
from nomad_gpu.store.pgschema import MIGRATIONS, VERSION
from nomad_gpu.store.quota import TeamQuota
from tests.store.history_data import GPU, SHARE, WINDOWS, expected, got, history, job, spec

pytestmark = pytest.mark.server


def test_pruned_records_fold_and_stored_sizes_are_exact(pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    history(store)
    with psycopg.connect(pg_dsn) as db:
        sizes = db.execute("SELECT SUM(size), SUM(octet_length(spec) + octet_length(history)"
                           " + octet_length(placements)) FROM entries WHERE spec_base IS NULL").fetchone()
        assert sizes is not None and sizes[0] == sizes[1]
    quota = TeamQuota(max_entries=100, max_stored_bytes=1 << 20, max_kept_entries=10, max_kept_bytes=1 << 20)
    store.add([job("nlp", 10000.0)], quota)
    assert store.purge_finished(before=50000.0) > 0
    with psycopg.connect(pg_dsn) as db:
        folded = db.execute("SELECT COUNT(*), SUM(jobs) FROM usage_jobs WHERE entry_id IS NULL").fetchone()
        assert folded is not None and folded[1] >= 40 and folded[0] <= 7  # 40 cancelled: one row (2 preempted ran)
        assert db.execute("SELECT COUNT(*) FROM spec_bases").fetchone() == (0,)  # the sweep's spec went too
    store.close()


def test_two_replicas_pruning_one_team_at_once_keep_its_bound(pg_dsn: str) -> None:
    a, b = open_store(pg_dsn), open_store(pg_dsn)
    quota = TeamQuota(max_entries=1000, max_stored_bytes=1 << 22, max_kept_entries=50, max_kept_bytes=1 << 22)
    for round_ in range(6):
        batch = a.add([job("nlp", float(round_)) for _ in range(20)], quota)
        a.cancel_queued([e.id for e in batch], float(round_) + 0.5, "cancelled")
    errors: list[BaseException] = []

    def submit(store: Store, at: float) -> None:
        try:
            store.add([job("nlp", at) for _ in range(10)], quota)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(s, 100.0 + i)) for i, s in enumerate((a, b, a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(b.list(team="nlp")) <= 50 + 10  # the bound, and the last submission past it
    assert len(b.list(team="nlp", states=[EntryState.QUEUED])) == 40  # every submission stored
    a.close()
    b.close()


def test_a_database_of_schema_v1_gets_its_usage_record(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as db:  # the schema as the release before the record
        db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        first = MIGRATIONS[0]
        assert isinstance(first, str)
        for statement in first.split(";"):
            if statement.strip():
                db.execute(statement.encode())
        db.execute("INSERT INTO schema_version (version) VALUES (1)")
        db.execute("INSERT INTO kv (key, value) VALUES ('instance', 'abc123')")
        db.execute("INSERT INTO spec_bases (id, spec) VALUES ('hp-s1', %s)", (dumps(spec("nlp", kind="mig")),))
        Row = tuple[str, str, dict[str, Any], str | None, list[dict[str, Any]], str, float, float | None,
                    list[dict[str, Any]]]
        rows: list[Row] = [("q000001", "vision", spec("vision"), None, [GPU], "complete", 1000.0, 4600.0,
                 [{"from": "queued", "to": "admitted", "at": 1010.0}, {"from": "running", "to": "complete",
                                                                        "at": 4600.0}]),
                ("q000002", "nlp", spec("nlp", kind="share", job_class="hpo"), None, [SHARE], "failed", 1200.0,
                 2000.0, [{"from": "queued", "to": "admitted", "at": 1200.0},
                          {"from": "admitted", "to": "failed", "at": 2000.0}]),
                ("q000003", "nlp", spec("nlp"), None, [GPU], "running", 1300.0, None,
                 [{"from": "queued", "to": "admitted", "at": 1400.0}])]
        rows += [(f"q00000{4 + i}", "nlp", {}, "hp-s1", [], "cancelled", 2000.0, 2500.0,
                  [{"from": "queued", "to": "cancelled", "at": 2500.0}]) for i in range(3)]
        for entry_id, team, body, base, placements, state, submitted, finished, events in rows:
            db.execute("INSERT INTO entries (id, name, team, priority, spec, submitted_at, state, placements,"
                       " finished_at, sweep, history, spec_base) VALUES (%s, 'j', %s, 50, %s, %s, %s, %s, %s, %s,"
                       " %s, %s)", (entry_id, team, dumps(body), submitted, state, dumps(placements), finished, base,
                                    json.dumps(events), base))
    store = open_store(pg_dsn)
    for by in GROUPINGS:
        for since, until in WINDOWS:
            assert got(store, by, since, until, 20000.0) == expected(store, by, since, until, 20000.0), (by, since)
    assert [(s.id, s.states) for s in store.sweep_summaries("nlp")] == [("hp-s1", {"cancelled": 3})]
    with psycopg.connect(pg_dsn) as db:
        assert db.execute("SELECT version FROM schema_version").fetchone() == (VERSION,)
        sizes = db.execute("SELECT size FROM entries ORDER BY seq").fetchall()
        assert all(r[0] > 0 for r in sizes) and sizes[3][0] > sizes[4][0]  # the sweep's spec on its first
    assert store.add([QueueEntry(id="", name="n", team="nlp", priority=50, spec=spec("nlp"),
                                 submitted_at=3000.0)])[0].id
    store.close()
