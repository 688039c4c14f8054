"""The one place a store is built: from a plain path or a URL, as `serve --db` and the settings give it.

The service and the CLI never name an implementation; they call `open_store` and hold a `Store`
(store/contract.py). Accepted: a plain path (`nomad-gpu.db`, `/var/lib/nomad-gpu/q.db`), `:memory:`, and
SQLite URLs as SQLAlchemy writes them: `sqlite:///relative.db`, `sqlite:////absolute.db`, and
`sqlite://` or `sqlite:///:memory:` for a database in memory; and a PostgreSQL URL,
`postgresql://user:password@host:5432/dbname` (or `postgres://`, or libpq's options after `?`), for the
PostgreSQL store (store/postgres.py), which several services can share.
"""

from __future__ import annotations

import re

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.store.contract import Store
from nomad_gpu.store.location import redacted
from nomad_gpu.store.sqlite import SqliteStore

MEMORY = ":memory:"
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES = ("postgres", "postgresql")
"""libpq's own schemes (`postgresql+psycopg://`, SQLAlchemy's, is not a URL libpq reads)."""


class UnsupportedStore(InvalidRequest):
    """A store location this release cannot open (an unknown scheme, or a store not built yet)."""


def sqlite_path(location: str) -> str:
    """The SQLite file (or `:memory:`) that ``location`` names; UnsupportedStore for any other store."""
    m = _SCHEME.match(location)
    if m is None:
        if not location:
            raise UnsupportedStore("the queue database is empty: give a file path or sqlite:///path")
        return location
    scheme = m.group("scheme").lower()
    if scheme in _POSTGRES:
        raise UnsupportedStore(f"{redacted(location)}: a PostgreSQL queue, not a SQLite file: back it up with "
                               "pg_dump, or copy it to a SQLite file with nomad-gpu store copy")
    if scheme != "sqlite":
        raise UnsupportedStore(f"{redacted(location)}: unknown queue store {scheme!r}; use a SQLite file (a path "
                               "or sqlite:///path) or PostgreSQL (postgresql://user@host:5432/dbname)")
    rest = location[m.end():]
    if rest == "":
        return MEMORY
    if not rest.startswith("/"):
        raise UnsupportedStore(f"{location}: a SQLite URL names a file, not a host: sqlite:///relative.db or "
                               "sqlite:////absolute.db")
    path = rest[1:]
    if not path or "?" in path or "#" in path:
        raise UnsupportedStore(f"{location}: a SQLite URL is sqlite:/// and a file path, without options")
    return path


def open_store(location: str, *, exclusive: bool = False, replica: bool = False) -> Store:
    """The store at ``location`` (a path or URL, see the module docstring). ``exclusive=True`` (the
    service) holds the database for this process: a second service on it fails with StoreLocked before
    anything is read. StoreDamaged when the database fails its check; UnsupportedStore (one line) for a
    location this release cannot open; for PostgreSQL, StoreRefused (one line) for a DSN that cannot work
    and StoreUnavailable for a server that cannot be reached now. On PostgreSQL ``exclusive`` holds an
    advisory lock of the database's (store/pgconnect.py `hold_service_lock`) instead of a lock file;
    ``replica=True`` shares that lock with the other replicas of a highly available service (SQLite has one
    process per file: there it is ``exclusive``)."""
    store: Store  # mypy proves at each assignment that the implementation keeps the contract
    if is_postgres(location):
        from nomad_gpu.store.postgres import PostgresStore  # psycopg is loaded only for this store

        store = PostgresStore(_libpq(location), exclusive=exclusive, replica=replica)
        return store
    store = SqliteStore(sqlite_path(location), exclusive=exclusive or replica)
    return store


def is_postgres(location: str) -> bool:
    m = _SCHEME.match(location)
    return m is not None and m.group("scheme").lower() in _POSTGRES


def _libpq(location: str) -> str:
    """The URL as libpq reads it (it knows `postgresql://` and `postgres://`, in lower case)."""
    m = _SCHEME.match(location)
    assert m is not None
    return "postgresql://" + location[m.end():]
