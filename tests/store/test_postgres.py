"""What the PostgreSQL store adds to the contract suite: several connections (replicas) writing at once
to one database, an outage of the server, and the bad input `serve` refuses in one line (exit 2,
nothing written). Every test here uses the throwaway server of tests/store/pg.py."""

from __future__ import annotations

import fnmatch
import functools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.domain.errors import OverLimit
from nomad_gpu.store import EntryState, Store, open_store
from nomad_gpu.store.contract import StaleTransition, StoreUnavailable, TeamQuota
from nomad_gpu.store.pgconnect import IDLE_PROBE_S
from nomad_gpu.store.pgglob import glob_regex
from nomad_gpu.store.postgres import PostgresStore
from tests.store.contract.conftest import entry
from tests.store.pg import PgServer

pytestmark = pytest.mark.server


@pytest.fixture
def two(pg_dsn: str) -> Iterator[tuple[Store, Store]]:
    """Two stores on one database: two replicas, each with its own connection."""
    a, b = open_store(pg_dsn), open_store(pg_dsn)
    yield a, b
    a.close()
    b.close()


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` on threads released together; each one's result or the exception it raised."""
    start = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the test reads what each raised
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_one_idempotency_key_sent_to_two_replicas_at_once_stores_one_entry(two: tuple[Store, Store]) -> None:
    a, b = two
    for n in range(25):
        key = f"k{n}"
        got = at_once([lambda n=n, key=key: a.add([entry(f"a{n}", key=key)]),  # type: ignore[misc]
                       lambda n=n, key=key: b.add([entry(f"b{n}", key=key)])])  # type: ignore[misc]
        assert not [g for g in got if isinstance(g, Exception)], got
        assert got[0][0].id == got[1][0].id  # both answered with the first submission
    assert len(a.list()) == 25


def test_one_idempotency_key_waiting_on_an_open_transaction_gets_its_entry(two: tuple[Store, Store],
                                                                           pg_dsn: str) -> None:
    """The race made certain: the key is inserted by a transaction still open when the second store looks
    it up (so its lookup finds nothing and its insert waits); once that commits, the second gets its entry."""
    a, b = two
    (first,) = a.add([entry("first")])
    with psycopg.connect(pg_dsn) as other:
        other.execute("UPDATE entries SET idempotency_key = 'k' WHERE id = %s", (first.id,))
        result: list[Any] = []
        waiting = threading.Thread(target=lambda: result.append(b.add([entry("second", key="k")])))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # blocked on the open transaction's key
        other.commit()
    waiting.join(10)
    assert [e.id for e in result[0]] == [first.id] and len(a.list()) == 1


def test_a_team_limit_holds_across_replicas(two: tuple[Store, Store]) -> None:
    a, b = two
    quota = TeamQuota(max_entries=1, max_stored_bytes=1 << 20)
    for n in range(15):
        got = at_once([lambda n=n: a.add([entry(f"a{n}", team=f"x{n}")], quota),  # type: ignore[misc]
                       lambda n=n: b.add([entry(f"b{n}", team=f"x{n}")], quota)])  # type: ignore[misc]
        assert sorted(type(g).__name__ for g in got) == ["OverLimit", "list"], got
        assert len(a.list(team=f"x{n}")) == 1
    assert isinstance(got[0], OverLimit) or isinstance(got[1], OverLimit)


def test_two_replicas_admitting_one_entry_at_once_one_wins(two: tuple[Store, Store]) -> None:
    a, b = two
    for n in range(15):
        (e,) = a.add([entry(f"e{n}")])
        got = at_once([functools.partial(s.transition, e.id, EntryState.ADMITTED, expect=[EntryState.QUEUED],
                                         attempts=1, placements=({"node": node},))
                       for s, node in ((a, "n1"), (b, "n2"))])
        assert sorted(type(g).__name__ for g in got) == ["QueueEntry", "StaleTransition"], got
        won = next(g for g in got if not isinstance(g, StaleTransition))
        assert b.get(e.id).placements == won.placements


def test_sweep_numbers_from_two_replicas_never_repeat(two: tuple[Store, Store]) -> None:
    a, b = two
    got = at_once([lambda: [a.new_sweep_id("s") for _ in range(30)], lambda: [b.new_sweep_id("s") for _ in range(30)]])
    assert len(set(got[0]) | set(got[1])) == 60


def test_a_connection_the_server_ended_while_idle_is_opened_again_at_the_next_transaction(
        pg_dsn: str, pg_server: PgServer) -> None:
    """A database restart or failover, or an administrator's terminate, ends an idle connection; the store
    learns it only at its next statement, before anything of that transaction ran, so it connects again
    there instead of failing the first request after the database is back."""
    store = open_store(pg_dsn)
    (e,) = store.add([entry()])
    terminate(pg_server, pg_dsn)
    assert store.transition(e.id, EntryState.CANCELLED, finished_at=1.0).state is EntryState.CANCELLED
    terminate(pg_server, pg_dsn)
    time.sleep(IDLE_PROBE_S)  # a read probes a connection idle this long first (a transaction learns it at BEGIN)
    assert store.get(e.id).state is EntryState.CANCELLED
    store.close()


def test_a_lost_connection_that_cannot_be_opened_again_is_unavailable_and_the_next_call_connects(
        pg_dsn: str, pg_server: PgServer) -> None:
    store = open_store(pg_dsn)
    (e,) = store.add([entry()])
    dbname = pg_dsn.rsplit("/", 1)[1]
    with pg_server.admin() as admin:
        admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS false".encode())
    try:
        terminate(pg_server, pg_dsn)
        with pytest.raises(StoreUnavailable):  # a 503 with Retry-After from the API
            store.transition(e.id, EntryState.CANCELLED, finished_at=1.0)
    finally:
        with pg_server.admin() as admin:
            admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS true".encode())
    assert store.get(e.id).state is EntryState.QUEUED  # nothing half written
    assert store.transition(e.id, EntryState.CANCELLED, finished_at=1.0).state is EntryState.CANCELLED
    store.close()


def terminate(pg_server: PgServer, pg_dsn: str) -> None:
    with pg_server.admin() as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
                      " AND application_name LIKE 'nomad-gpu %%'", (pg_dsn.rsplit("/", 1)[1],))


def test_a_server_that_is_down_is_unavailable() -> None:
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        open_store("postgresql://nomad:s3cret@127.0.0.1:1/queue")


# ---- serve: bad input, one line, exit 2, nothing written ----------------------------------------------
def serve(tmp_path: Path, db: str, *, service_name: str | None = None, env: dict[str, str] | None = None) -> Any:
    args = ["serve"] + (["--db", db] if db else [])
    if service_name:
        (tmp_path / "c.yaml").write_text(f"service_name: {service_name}\n")
        args += ["--config", str(tmp_path / "c.yaml")]
    return CliRunner().invoke(main, args, env={"NOMAD_ADDR": "http://127.0.0.1:1", **(env or {})})


def one_line_exit_2(result: Any, said: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.output, result.output
    assert "test-secret" not in result.output


@pytest.mark.parametrize(("dsn", "said"), [
    pytest.param("postgresql://u:test-secret@[::1/queue", "not a PostgreSQL URL", id="unclosed-bracket"),
    pytest.param("postgresql://u:test-secret@h:port/queue", "not a port number", id="bad-port"),
    pytest.param("postgresql://u:test-secret@h:5432/queue?colour=red", "not a PostgreSQL URL", id="bad-option"),
    pytest.param("postgresql://u:test-secret@h:5432/", "name the database", id="no-database"),
])
def test_a_malformed_dsn_is_refused(tmp_path: Path, dsn: str, said: str) -> None:
    one_line_exit_2(serve(tmp_path, dsn), said)


def test_a_wrong_password_is_refused(tmp_path: Path, pg_server: PgServer, pg_dsn: str) -> None:
    one_line_exit_2(serve(tmp_path, pg_dsn.replace(":test-secret@", ":wrong@")), "password authentication failed")
    with psycopg.connect(pg_dsn) as db:  # nothing written
        assert db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_the_dsn_comes_from_nomad_gpu_db(tmp_path: Path, pg_dsn: str) -> None:
    one_line_exit_2(serve(tmp_path, "", env={"NOMAD_GPU_DB": pg_dsn.replace(":test-secret@", ":wrong@")}),
                    "password authentication failed")


def test_a_database_of_another_service_is_refused(tmp_path: Path, pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    store.set_meta("service_name", "team-a-queue")
    store.close()
    with psycopg.connect(pg_dsn) as db:
        before = db.execute("SELECT key, value FROM kv ORDER BY key").fetchall()
    one_line_exit_2(serve(tmp_path, pg_dsn, service_name="team-b-queue"), "belongs to the service 'team-a-queue'")
    with psycopg.connect(pg_dsn) as db:
        assert db.execute("SELECT key, value FROM kv ORDER BY key").fetchall() == before


def test_a_schema_newer_than_the_code_is_refused(tmp_path: Path, pg_dsn: str) -> None:
    open_store(pg_dsn).close()
    with psycopg.connect(pg_dsn) as db:
        db.execute("UPDATE schema_version SET version = 99")
    one_line_exit_2(serve(tmp_path, pg_dsn), "schema version 99")
    with psycopg.connect(pg_dsn) as db:
        assert db.execute("SELECT version FROM schema_version").fetchone() == (99,)
        assert db.execute("SELECT count(*) FROM kv WHERE key = 'service_name'").fetchone() == (0,)


def test_the_store_is_the_postgresql_one(pg_dsn: str) -> None:
    store = open_store(pg_dsn.replace("postgresql://", "postgres://"))
    assert isinstance(store, PostgresStore) and store.created
    store.close()
    again = open_store(pg_dsn)
    assert not again.created  # the instance prefix was made once
    again.close()


def test_the_server_matches_each_glob_as_fnmatch_does(pg_dsn: str) -> None:
    from tests.store.test_postgres_pure import NAMES

    patterns = ["train-*", "*-[!ab]", "*-[^ab]", "eval-?", "a[]]b", "a[-]b", "a[.+]b", "[[]x]", "a[!-.]b", "[a-f]*",
                "*[!a-z]*", "x\\y", "a^b", "a[!!]b", "é-?", ""]
    with psycopg.connect(pg_dsn) as db:
        for pattern in patterns:
            regex = glob_regex(pattern)
            got = [n for n in NAMES if db.execute("SELECT %s ~ %s", (n, regex)).fetchone() == (True,)]
            want = [n for n in NAMES if fnmatch.fnmatchcase(n, pattern.replace("[^", "[!"))]
            assert got == want, pattern


def test_one_service_per_database(pg_dsn: str, tmp_path: Path) -> None:
    from nomad_gpu.store.lock import StoreLocked

    serving = open_store(pg_dsn, exclusive=True)
    with pytest.raises(StoreLocked, match="in use by another nomad-gpu service"):
        open_store(pg_dsn, exclusive=True)
    code = CliRunner().invoke(main, ["store", "copy", pg_dsn, str(tmp_path / "b.db")])
    assert code.exit_code == 2 and "in use" in code.output and not (tmp_path / "b.db").exists(), code.output
    open_store(pg_dsn).close()  # a reader (the CLI's tools) is not a service
    serving.close()
    open_store(pg_dsn, exclusive=True).close()  # the lock went with the session


def test_a_database_with_another_applications_tables_is_refused(tmp_path: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as db:
        db.execute("CREATE TABLE entries (id INTEGER)")
    one_line_exit_2(serve(tmp_path, pg_dsn), "tables nomad-gpu did not make (entries)")
    with psycopg.connect(pg_dsn) as db:
        assert db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall() == [("entries",)]
