"""`nomad-gpu backup`: a consistent, self-contained copy of the queue, taken while the service writes."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service import backup as backup_module
from nomad_gpu.service.backup import backup_database
from nomad_gpu.store import SqliteStore


def wal_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE a (id INTEGER PRIMARY KEY)")
    db.execute("CREATE TABLE b (id INTEGER PRIMARY KEY)")
    return db


def test_backup_of_the_serving_store_while_it_holds_its_lock(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    store = SqliteStore(str(db), exclusive=True)  # as `serve` holds it: the file lock and an open connection
    try:
        store.set_meta("marker", "before")
        result = backup_database(db, tmp_path / "copy.db")
        store.set_meta("marker", "after")  # the service keeps writing after (and during) a backup
        assert store.get_meta("marker") == "after"
    finally:
        store.close()
    copy = SqliteStore(str(tmp_path / "copy.db"))
    try:
        assert copy.get_meta("marker") == "before"
        assert copy.instance == SqliteStore(str(db)).instance  # the same queue, the same job-ID prefix
    finally:
        copy.close()
    assert result.bytes == (tmp_path / "copy.db").stat().st_size and result.pages > 0


def test_an_open_write_transaction_neither_blocks_nor_leaks_into_the_copy(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    writer = wal_db(db)
    writer.execute("INSERT INTO a VALUES (1)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO a VALUES (2)")  # not committed while the backup runs
    backup_database(db, tmp_path / "copy.db", timeout_s=1.0)
    writer.execute("COMMIT")
    copy = sqlite3.connect(tmp_path / "copy.db")
    assert copy.execute("SELECT id FROM a").fetchall() == [(1,)]
    assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # one file to keep, no -wal beside it
    copy.close()
    assert not (tmp_path / "copy.db-wal").exists()


def test_the_copy_is_one_snapshot_while_commits_go_on(tmp_path: Path) -> None:
    """Every commit adds one row to each of two tables: any consistent copy has as many rows in each."""
    db = tmp_path / "queue.db"
    writer = wal_db(db)
    stop = threading.Event()
    commits = 0

    def write() -> None:
        nonlocal commits
        while not stop.is_set():
            with writer:
                writer.execute("BEGIN IMMEDIATE")
                writer.execute("INSERT INTO a DEFAULT VALUES")
                writer.execute("INSERT INTO b DEFAULT VALUES")
                writer.execute("COMMIT")
            commits += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        while commits < 200:
            stop.wait(0.001)
        copies = [backup_database(db, tmp_path / f"copy{i}.db").path for i in range(5)]
    finally:
        stop.set()
        thread.join()
    for path in copies:
        copy = sqlite3.connect(path)
        a, b = (copy.execute(f"SELECT count(*), coalesce(max(id), 0) FROM {t}").fetchone() for t in ("a", "b"))
        copy.close()
        assert a == b and a[0] == a[1] >= 200


def test_a_stopped_service_database_backs_up_too(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    store = SqliteStore(str(db), exclusive=True)
    store.set_meta("marker", "kept")
    store.close()  # the last connection checkpoints and removes -wal and -shm
    backup_database(db, tmp_path / "copy.db")
    assert sqlite3.connect(tmp_path / "copy.db").execute("SELECT value FROM kv WHERE key='marker'").fetchone() == (
        "kept",)


@pytest.mark.parametrize(("setup", "dest", "message"), [
    pytest.param(None, "copy.db", "no such queue database", id="no-database"),
    pytest.param("garbage", "copy.db", "cannot read it as a SQLite database", id="not-a-database"),
    pytest.param("db", "exists.db", "already exists (pass --force", id="dest-exists"),
    pytest.param("db", "missing/copy.db", "no such directory", id="dest-dir-missing"),
    pytest.param("db", "queue.db", "already exists", id="onto-itself"),
])
def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path, setup: str | None, dest: str,
                                                         message: str) -> None:
    db = tmp_path / "queue.db"
    if setup == "garbage":
        db.write_bytes(b"not a database at all, but long enough to have a header" * 4)
    elif setup == "db":
        wal_db(db).close()
    (tmp_path / "exists.db").write_text("keep me")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(")):
        backup_database(db, tmp_path / dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "exists.db").read_text() == "keep me"


def test_force_replaces_but_never_the_database_itself(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    wal_db(db).close()
    (tmp_path / "old.db").write_text("an older backup")
    backup_database(db, tmp_path / "old.db", overwrite=True)
    assert sqlite3.connect(tmp_path / "old.db").execute("SELECT count(*) FROM a").fetchone() == (0,)
    with pytest.raises(InvalidRequest, match="is the database itself"):
        backup_database(db, db, overwrite=True)


def test_a_failed_copy_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "queue.db"
    wal_db(db).close()

    def broken(src: sqlite3.Connection, tmp: Path, source: Path) -> tuple[int, int]:
        tmp.write_bytes(b"half a page")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(backup_module, "_copy", broken)
    with pytest.raises(OSError):
        backup_database(db, tmp_path / "copy.db")
    # SQLite's own -wal/-shm may appear beside the database (a read-only reader of a WAL file makes them)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == ["queue.db"]


def test_cli_backup(tmp_path: Path) -> None:
    db = tmp_path / "queue.db"
    SqliteStore(str(db)).close()
    runner = CliRunner()
    ok = runner.invoke(main, ["backup", str(tmp_path / "copy.db"), "--db", str(db)])
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.startswith(f"backed up {db} to {tmp_path / 'copy.db'}: ")
    again = runner.invoke(main, ["backup", str(tmp_path / "copy.db"), "--db", str(db)])
    assert again.exit_code == 2
    assert again.stderr.strip().splitlines() == [f"error: {tmp_path / 'copy.db'}: already exists (pass --force to "
                                                 "replace it)"]
    missing = runner.invoke(main, ["backup", str(tmp_path / "c2.db"), "--db", str(tmp_path / "nope.db")])
    assert missing.exit_code == 2 and "no such queue database" in missing.stderr
