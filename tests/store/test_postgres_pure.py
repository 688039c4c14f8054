"""The PostgreSQL store's pure parts, without a server (so `make check` sees them): the glob it filters
names by, the DSN checks, and PostgreSQL's errors turned into the contract's."""

from __future__ import annotations

import fnmatch
import re

import psycopg
import pytest

from nomad_gpu.domain.errors import Unavailable
from nomad_gpu.store.contract import StoreFull, StoreUnavailable
from nomad_gpu.store.location import redacted
from nomad_gpu.store.pgconnect import PgSpace, StoreRefused, checked_dsn, translated
from nomad_gpu.store.pgglob import glob_regex

NAMES = ["train-a", "train-b", "eval-c", "eval-d", "train-xyz", "a]b", "a-b", "a.b", "a+b", "[x]", "a^b", "a!b",
         "é-1", "x\\y", "ab", ""]


@pytest.mark.parametrize("pattern", [
    "train-*", "*-[!ab]", "eval-?", "*", "?", "a[]]b", "a[-]b", "a[.+]b", "a.b", "[[]x]", "a[!-.]b", "[a-f]*",
    "*[!a-z]*", "x\\y", "a^b", "a[!!]b", "é-?", "",
])
def test_a_glob_matches_what_fnmatch_matches(pattern: str) -> None:
    """Python's `re` reads these escapes as PostgreSQL's AREs do (a backslash before a non-alphanumeric
    character is that character, inside a set too); the store's own test runs the same on the server."""
    regex = re.compile(glob_regex(pattern), re.DOTALL)
    assert [n for n in NAMES if regex.search(n)] == [n for n in NAMES if fnmatch.fnmatchcase(n, pattern)]


def test_a_caret_negates_a_set_as_sqlite_glob_does() -> None:
    assert [n for n in NAMES if re.search(glob_regex("*-[^ab]"), n)] == ["eval-c", "eval-d", "é-1"]


@pytest.mark.parametrize(("dsn", "said"), [
    pytest.param("postgresql://u:pw@[::1/q", "not a PostgreSQL URL", id="unclosed"),
    pytest.param("postgresql://u:pw@h:99999/q", "not a port number", id="port-range"),
    pytest.param("postgresql://u:pw@h/q?nonsense=1", "not a PostgreSQL URL", id="option"),
    pytest.param("postgresql://u:pw@h", "name the database", id="no-database"),
])
def test_a_dsn_that_cannot_work_is_refused_without_its_password(dsn: str, said: str) -> None:
    with pytest.raises(StoreRefused, match=re.escape(said)) as refused:
        checked_dsn(dsn)
    assert ":pw@" not in str(refused.value) and "\n" not in str(refused.value)


def test_a_password_never_shows() -> None:
    assert redacted("postgresql://u:pw@h/q?password=pw2&x=1") == "postgresql://u:***@h/q?password=***&x=1"


def test_a_full_disk_is_store_full_and_its_return_is_told() -> None:
    space, told = PgSpace(), []
    space.listen(lambda: told.append(True))
    with pytest.raises(StoreFull) as full, translated("postgresql://u:pw@h/q", space):
        raise psycopg.errors.DiskFull("could not extend file")
    assert isinstance(full.value, Unavailable) and space.full and told == []
    with translated("postgresql://u:pw@h/q", space):
        pass
    assert told == [True] and not space.full


@pytest.mark.parametrize("error", [psycopg.OperationalError("server closed the connection unexpectedly"),
                                   psycopg.errors.AdminShutdown("terminating connection")])
def test_a_lost_server_is_unavailable(error: psycopg.Error) -> None:
    with pytest.raises(StoreUnavailable, match="unavailable") as lost, translated("postgresql://u:pw@h/q"):
        raise error
    assert ":pw@" not in str(lost.value)


def test_any_other_database_error_stays_the_drivers() -> None:
    with pytest.raises(psycopg.errors.UniqueViolation), translated("postgresql://u:pw@h/q"):
        raise psycopg.errors.UniqueViolation("duplicate key")


def test_damaged_data_is_store_damaged() -> None:
    from nomad_gpu.store.contract import StoreDamaged

    with pytest.raises(StoreDamaged, match="damaged"), translated("postgresql://u:pw@h/q"):
        raise psycopg.errors.DataCorrupted("invalid page in block 0")


def test_the_settings_never_show_the_password() -> None:
    from nomad_gpu.service.config.settings import ServiceSettings

    assert "pw" not in repr(ServiceSettings(db_path="postgresql://u:pw@h/q"))
