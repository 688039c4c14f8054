"""The store contract suite (store/contract.py): what the service relies on, and what any store must pass.

Every test here takes `store` (a fresh database) or `store_factory` (to open several, or one again) and
nothing of an implementation. A second store plugs in as one more param of `store_factory`; tests of a
single implementation (SQLite's write-ahead log, its fsync modes, its lock file) stay beside it in
tests/store/. The PostgreSQL param starts a server (tests/store/pg.py), so it is marked `server`: `make
check` runs the suite on SQLite only, `make test` on both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import psycopg
import pytest

from nomad_gpu.store import QueueEntry, SqliteStore, Store, open_store
from nomad_gpu.store.postgres import PostgresStore
from tests.store.pg import PgServer


@dataclass
class StoreFactory:
    """Opens databases of one implementation, and closes them after the test."""

    opener: Callable[[str], Store]
    persistent: bool
    """Whether opening a name again gives the database written before (a file, a server's database);
    otherwise each open is a new, empty database."""
    fill: Callable[[Store], None] | None = None
    """Make the store's disk full (writes that need more room fail); None: it cannot be done generically."""
    free: Callable[[Store], None] | None = None
    """Give the room back."""
    opened: list[Store] = field(default_factory=list)

    def open(self, name: str = "main") -> Store:
        store = self.opener(name)
        self.opened.append(store)
        return store

    def reopen(self, store: Store, name: str = "main") -> Store:
        """``store`` closed and its database opened again (only where `persistent`)."""
        store.close()
        return self.open(name)


def _sqlite_fill(store: Store) -> None:
    db = cast(SqliteStore, store)._db
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")


def _sqlite_free(store: Store) -> None:
    cast(SqliteStore, store)._db.execute("PRAGMA max_page_count = 1073741823")


_FULL = (
    "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION"
    " 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$",
    *(f"CREATE TRIGGER full_{t} BEFORE INSERT OR UPDATE ON {t} FOR EACH STATEMENT EXECUTE FUNCTION disk_full()"
      for t in ("entries", "kv", "stops", "spec_bases")),
)


def _pg_fill(store: Store) -> None:
    """PostgreSQL's full disk as its clients see it: every write fails with SQLSTATE 53100 (disk_full),
    raised here by triggers, since a test cannot fill the server's disk."""
    with psycopg.connect(cast(PostgresStore, store).location, autocommit=True) as db:
        for statement in _FULL:
            db.execute(statement.encode())


def _pg_free(store: Store) -> None:
    with psycopg.connect(cast(PostgresStore, store).location, autocommit=True) as db:
        db.execute("DROP FUNCTION disk_full() CASCADE")


@pytest.fixture(params=["sqlite-file", "sqlite-memory", pytest.param("postgresql", marks=pytest.mark.server)])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    if request.param == "postgresql":  # a fresh database on the session's throwaway server (tests/store/pg.py)
        server: PgServer = request.getfixturevalue("pg_server")
        names: dict[str, str] = {}

        def open_pg(name: str) -> Store:
            if name not in names:
                names[name] = server.create_database()
            return open_store(server.dsn(names[name]))

        factory = StoreFactory(open_pg, persistent=True, fill=_pg_fill, free=_pg_free)
        yield factory
        for store in factory.opened:
            store.close()
        for dbname in names.values():
            server.drop_database(dbname)
        return
    if request.param == "sqlite-file":
        factory = StoreFactory(lambda name: open_store(f"sqlite:///{tmp_path / name}.db"), persistent=True,
                               fill=_sqlite_fill, free=_sqlite_free)
    else:
        factory = StoreFactory(lambda name: open_store(":memory:"), persistent=False, fill=_sqlite_fill,
                               free=_sqlite_free)
    yield factory
    for store in factory.opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    return store_factory.open()


def entry(name: str = "a", *, team: str = "t", key: str | None = None, sweep: str | None = None,
          spec: Mapping[str, object] | None = None) -> QueueEntry:
    """A new entry (no ID yet), as the service builds one from a submission."""
    return QueueEntry(id="", name=name, team=team, priority=50, spec={"name": name} if spec is None else spec,
                      submitted_at=1.0, idempotency_key=key, sweep=sweep)
