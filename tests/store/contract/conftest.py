"""The store contract suite (store/contract.py): what the service relies on, and what any store must pass.

Every test here takes `store` (a fresh database) or `store_factory` (to open several, or one again) and
nothing of an implementation. A second store plugs in as one more param of `store_factory`; tests of a
single implementation (SQLite's write-ahead log, its fsync modes, its lock file) stay beside it in
tests/store/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from nomad_gpu.store import QueueEntry, SqliteStore, Store, open_store


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


@pytest.fixture(params=["sqlite-file", "sqlite-memory"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
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
