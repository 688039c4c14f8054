"""The store is built in one place (store/factory.py) from a path or a URL, and the rest of the package
holds it by its contract only: no module outside store/ names the SQLite store or imports its module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.store import EntryState, open_store
from nomad_gpu.store.factory import MEMORY, UnsupportedStore, sqlite_path
from nomad_gpu.store.lock import StoreLocked
from tests.store.contract.conftest import entry

PACKAGE = Path(__file__).resolve().parents[2] / "nomad_gpu"


@pytest.mark.parametrize(("location", "path"), [
    pytest.param("nomad-gpu.db", "nomad-gpu.db", id="relative-path"),
    pytest.param("/var/lib/nomad-gpu/q.db", "/var/lib/nomad-gpu/q.db", id="absolute-path"),
    pytest.param(":memory:", MEMORY, id="memory"),
    pytest.param("sqlite:///q.db", "q.db", id="url-relative"),
    pytest.param("sqlite:////var/lib/q.db", "/var/lib/q.db", id="url-absolute"),
    pytest.param("SQLite:///q.db", "q.db", id="url-scheme-any-case"),
    pytest.param("sqlite://", MEMORY, id="url-memory"),
    pytest.param("sqlite:///:memory:", MEMORY, id="url-memory-named"),
])
def test_a_path_or_a_sqlite_url_names_a_file(location: str, path: str) -> None:
    assert sqlite_path(location) == path


@pytest.mark.parametrize(("location", "said"), [
    pytest.param("postgresql+psycopg://nomad:s3cret@db/queue", "unknown queue store 'postgresql+psycopg'",
                 id="postgresql-driver"),
    pytest.param("mysql://db/queue", "unknown queue store 'mysql'", id="unknown-scheme"),
    pytest.param("sqlite://host/q.db", "not a host", id="sqlite-host"),
    pytest.param("sqlite:///", "without options", id="sqlite-no-file"),
    pytest.param("sqlite:///q.db?mode=ro", "without options", id="sqlite-options"),
    pytest.param("", "empty", id="empty"),
])
def test_what_cannot_be_opened_is_refused_in_one_line(location: str, said: str) -> None:
    with pytest.raises(UnsupportedStore, match=re.escape(said)) as refused:
        open_store(location)
    assert "\n" not in str(refused.value) and "s3cret" not in str(refused.value)


def test_a_url_opens_the_same_database_as_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///q.db", exclusive=True)
    with pytest.raises(StoreLocked):
        open_store(str(tmp_path / "q.db"), exclusive=True)  # one service per database, however it is named
    (e,) = store.add([entry()])
    store.close()
    again = open_store("q.db")
    assert again.get(e.id).state is EntryState.QUEUED
    again.close()


def test_a_backup_of_a_postgresql_store_is_refused_in_one_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["backup", "copy.db", "--db", "postgresql://nomad:s3cret@db/queue"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "pg_dump" in lines[0] and "s3cret" not in lines[0]
    assert not list(tmp_path.iterdir())  # nothing made


def test_serve_on_a_postgresql_server_that_cannot_be_reached_fails_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # port 1 of loopback: nothing listens, the connection is refused at once
    result = CliRunner().invoke(main, ["serve", "--db", "postgresql://nomad:s3cret@127.0.0.1:1/queue"])
    assert result.exit_code == 1, result.output  # not the operator's typing: retry once the server is up
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "cannot be reached" in lines[0] and "s3cret" not in lines[0]
    assert not list(tmp_path.iterdir())


def test_a_backup_takes_the_url_serve_takes(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "q.db"))
    store.add([entry()])
    store.close()
    result = CliRunner().invoke(main, ["backup", str(tmp_path / "copy.db"), "--db", f"sqlite:///{tmp_path}/q.db"])
    assert result.exit_code == 0, result.output
    assert [e.name for e in open_store(str(tmp_path / "copy.db")).list()] == ["a"]


def offenders(package: Path) -> list[str]:
    """Modules outside store/ that name the SQLite store or import its module."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "store":
            continue
        text = path.read_text(encoding="utf-8")
        if "SqliteStore" in text or re.search(r"nomad_gpu\.store\.sqlite\b|from \.+store\.sqlite\b", text):
            found.append(str(path.relative_to(package)))
    return found


def test_the_package_holds_its_store_by_the_contract_only() -> None:
    assert offenders(PACKAGE) == [], "type on nomad_gpu.store.contract.Store and build with open_store"
