"""The one place a store is built: from a plain path or a URL, as `serve --db` and the settings give it.

The service and the CLI never name an implementation; they call `open_store` and hold a `Store`
(store/contract.py). Accepted: a plain path (`nomad-gpu.db`, `/var/lib/nomad-gpu/q.db`), `:memory:`, and
SQLite URLs as SQLAlchemy writes them: `sqlite:///relative.db`, `sqlite:////absolute.db`, and
`sqlite://` or `sqlite:///:memory:` for a database in memory. A `postgresql://` URL is refused in one
line: that store comes with high availability (issue 36). A second store is added here, by scheme.
"""

from __future__ import annotations

import re

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.store.contract import Store
from nomad_gpu.store.sqlite import SqliteStore

MEMORY = ":memory:"
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES = ("postgres", "postgresql")


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
    if scheme.split("+")[0] in _POSTGRES:
        raise UnsupportedStore(f"{_redacted(location)}: a PostgreSQL queue store is not supported yet (it comes "
                               "with high availability, issue 36); use a SQLite file: a path or sqlite:///path")
    if scheme != "sqlite":
        raise UnsupportedStore(f"{_redacted(location)}: unknown queue store {scheme!r}; use a SQLite file: a path "
                               "or sqlite:///path")
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


def open_store(location: str, *, exclusive: bool = False) -> Store:
    """The store at ``location`` (a path or URL, see the module docstring). ``exclusive=True`` (the
    service) holds the database for this process: a second service on it fails with StoreLocked before
    anything is read. StoreDamaged when the database fails its check; UnsupportedStore (one line) for a
    location this release cannot open."""
    path = sqlite_path(location)
    store: Store = SqliteStore(path, exclusive=exclusive)  # mypy proves here that it keeps the contract
    return store


def _redacted(location: str) -> str:
    """The location without a password (`postgresql://user:secret@host/db` -> `postgresql://user:***@host/db`)."""
    return re.sub(r"^([^:/]+://[^:/@]*):[^@/]*@", r"\1:***@", location)
