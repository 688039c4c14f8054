"""`nomad-gpu store copy SRC DST`: a queue moved SQLite -> PostgreSQL -> SQLite is the same queue (entries,
their history, stop intents, named values, sweep counters, the instance prefix, GPU accounting's record
and the sweep summaries), and IDs and sweep numbers
carry on after the copy; a non-empty destination and a database a service holds are refused."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.service.accounting.report import GROUPINGS
from nomad_gpu.store import EntryState, Store, open_store
from nomad_gpu.store.contract import StopIntent
from tests.store.contract.conftest import entry

pytestmark = pytest.mark.server


def fill(store: Store) -> None:
    sweep = store.new_sweep_id("hpo")
    trials = store.add([entry(f"t{i}", sweep=sweep, spec={"name": "t", "lr": i, "pad": "x" * 100}) for i in range(5)])
    store.transition(trials[0].id, EntryState.ADMITTED, attempts=1, at=2.0,
                     placements=({"node": "n1", "instance_ids": ["GPU-1"], "gpu_equivalents": 1.0},))
    store.transition(trials[1].id, EntryState.CANCELLED, finished_at=3.0, at=3.0, reason="by user")
    store.add([entry("keyed", key="k1", team="other")])
    store.add_stop(StopIntent("ngpu-x-q000001", "default", "cancelled", 1.0, 0, 5.0))
    store.set_meta("relayouts", '{"a": 1}')


def picture(store: Store) -> dict[str, object]:
    return {"entries": [e.to_json() for e in store.list()], "stops": store.stops(),
            "instance": store.instance, "relayouts": store.get_meta("relayouts"),
            "counts": {s: store.sweep_count(s) for s in {e.sweep for e in store.list() if e.sweep}},
            "usage": usage(store), "sweeps": store.sweep_summaries()}


def usage(store: Store) -> dict[str, object]:
    return {by: store.usage_report(by, 0.0, 100.0, 100.0) for by in GROUPINGS}


def copy(src: str, dst: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["store", "copy", src, dst])
    return result.exit_code, result.output


def test_a_queue_copied_to_postgresql_and_back_is_the_same_queue(tmp_path: Path, pg_dsn: str) -> None:
    first = open_store(str(tmp_path / "a.db"))
    fill(first)
    before = picture(first)
    first.close()
    code, said = copy(str(tmp_path / "a.db"), pg_dsn)
    assert code == 0 and "copied 6 entries and 1 stop intents" in said and "test-secret" not in said, said
    on_pg = open_store(pg_dsn)
    assert picture(on_pg) == before and not on_pg.created
    assert on_pg.add([entry("next")])[0].id == "q000007"  # IDs carry on past the copied ones
    assert on_pg.new_sweep_id("hpo") == "hpo-s2"
    grown = usage(on_pg)
    assert grown != before["usage"]  # the new job counted
    on_pg.close()
    code, said = copy(pg_dsn, f"sqlite:///{tmp_path / 'b.db'}")
    assert code == 0, said
    back = open_store(str(tmp_path / "b.db"))
    after = picture(back)
    assert after["entries"][:6] == before["entries"]  # type: ignore[index]
    moved_on = ("entries", "usage")  # the job added on PostgreSQL is in both: compared with `grown` below
    assert {k: v for k, v in after.items() if k not in moved_on} == {k: v for k, v in before.items()
                                                                       if k not in moved_on}
    assert usage(back) == grown
    assert back.add([entry("again")])[0].id == "q000008" and back.new_sweep_id("x") == "x-s3"
    back.close()


def test_a_destination_that_holds_a_queue_is_refused_and_left_alone(tmp_path: Path, pg_dsn: str) -> None:
    src = open_store(str(tmp_path / "a.db"))
    fill(src)
    src.close()
    dst = open_store(pg_dsn)
    (mine,) = dst.add([entry("mine")])
    dst.close()
    code, said = copy(str(tmp_path / "a.db"), pg_dsn)
    assert code == 2 and "already holds a queue" in said and len(said.strip().splitlines()) == 1, said
    with psycopg.connect(pg_dsn) as db:
        assert db.execute("SELECT id FROM entries").fetchall() == [(mine.id,)]


def test_a_database_a_service_holds_is_refused(tmp_path: Path, pg_dsn: str) -> None:
    serving = open_store(str(tmp_path / "a.db"), exclusive=True)  # what `serve` holds
    fill(serving)
    code, said = copy(str(tmp_path / "a.db"), pg_dsn)
    serving.close()
    assert code == 2 and "in use by" in said, said
    with psycopg.connect(pg_dsn) as db:  # the destination was never opened
        assert db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_a_source_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    code, said = copy(str(tmp_path / "missing.db"), str(tmp_path / "b.db"))
    assert code == 2 and "no such queue database" in said and not (tmp_path / "missing.db").exists()
