"""Reaching the PostgreSQL store's database, and the one place its errors become the project's.

What the operator typed wrong (a malformed DSN, a wrong password, a database or role that does not exist)
is refused in one line (`StoreRefused`, bad input: exit 2); a connection the server ended while it sat idle (a
database restart or failover) is opened again before use (`begun`, `live`); a server that cannot be reached now,
or a connection lost under a query, is `StoreUnavailable` (503 with Retry-After from the API; the next call
connects again); a write the server's disk cannot hold (SQLSTATE 53100, disk_full) is `StoreFull`; data the server finds
damaged (XX001, XX002) is `StoreDamaged`.
The password never appears in a message (`redacted`).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import conninfo

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.store.contract import StoreDamaged, StoreFull, StoreUnavailable
from nomad_gpu.store.location import redacted

logger = logging.getLogger(__name__)

APPLICATION_NAME = f"nomad-gpu {os.getpid()} {secrets.token_hex(4)}"
"""Every connection of this process names itself so (`pg_stat_activity.application_name`): a replica that takes
the leader's lease ends every session of the old leader's process by it (store/pglease.py)."""
CONNECT_TIMEOUT_S = 5
"""How long one connection attempt waits for the server (libpq's connect_timeout)."""
_REFUSED = ("password authentication failed", "no password supplied", "does not exist", "invalid ",
            "authentication failed", "not permitted to log in", "pg_hba.conf")
"""libpq's words for a connection the operator's DSN cannot make, whatever is retried (it gives no SQLSTATE)."""
IDLE_PROBE_S = 1.0
"""A connection idle this long is probed (one empty query) before a read uses it: a database restart or failover,
or an administrator's terminate, ends it while idle, and the read would fail the first request after."""
DISK_FULL = "53100"
DAMAGED = ("XX001", "XX002")
"""data_corrupted, index_corrupted: what the server says of a damaged table or index."""


class StoreRefused(InvalidRequest):
    """The DSN cannot work as written: malformed, a wrong password, a database or role that does not exist."""


def checked_dsn(location: str) -> str:
    """``location`` if libpq can parse it and its port is a port; StoreRefused (one line) otherwise."""
    try:
        parts = conninfo.conninfo_to_dict(location)
    except psycopg.ProgrammingError as exc:
        said = _first_line(exc).replace(location, redacted(location))  # libpq quotes the whole URL
        raise StoreRefused(f"{redacted(location)}: not a PostgreSQL URL ({said}); write "
                           "postgresql://user@host:5432/dbname") from None
    for port in str(parts.get("port", "5432")).split(","):
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise StoreRefused(f"{redacted(location)}: port {port!r} is not a port number (1-65535)")
    if not parts.get("dbname"):
        raise StoreRefused(f"{redacted(location)}: name the database: postgresql://user@host:5432/dbname")
    return location


def connect(location: str) -> psycopg.Connection[tuple[Any, ...]]:
    """A connection in autocommit (each transaction is opened explicitly); StoreRefused or StoreUnavailable."""
    try:
        return psycopg.connect(location, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                               application_name=APPLICATION_NAME)
    except psycopg.OperationalError as exc:
        said = _first_line(exc).removeprefix("connection failed: ")
        if any(word in said for word in _REFUSED):
            raise StoreRefused(f"{redacted(location)}: {said}") from None
        raise StoreUnavailable(f"the queue database {redacted(location)} cannot be reached: {said}") from None


def hold_service_lock(location: str, *, shared: bool = False) -> psycopg.Connection[tuple[Any, ...]]:
    """A connection of its own holding the database's service lock (`pgschema.SERVICE_LOCK`) for as long
    as it is open: a second service on the database (or `store copy` while one serves it) is refused
    with StoreLocked before anything is read. ``shared``: a replica of a highly available service, which
    shares the lock with the other replicas (the leader's lease, store/pglease.py, says which one acts)
    and still keeps `store copy` out. The server drops the lock when the session ends, a killed
    service's included. A connection lost later lets the lock go: the leader's lease is what holds a
    service to the database through outages."""
    from nomad_gpu.store.lock import StoreLocked
    from nomad_gpu.store.pgschema import SERVICE_LOCK

    holder = connect(location)
    take = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
    row = holder.execute(f"SELECT {take}(%s)".encode(), (SERVICE_LOCK,)).fetchone()
    if not row or not row[0]:
        holder.close()
        raise StoreLocked(f"the queue database {redacted(location)} is in use by another nomad-gpu service; "
                          "run one service per database")
    return holder


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class PgSpace:
    """Whether the database's disk was full at the last write, and who is told when space returns."""

    def __init__(self) -> None:
        self.full = False
        self._listeners: list[Callable[[], None]] = []

    def listen(self, returned: Callable[[], None]) -> None:
        self._listeners.append(returned)

    def failed(self) -> None:
        if not self.full:
            self.full = True
            logger.warning("the queue database's disk is full: writes are refused until space is freed")

    def succeeded(self) -> None:
        if self.full:
            self.full = False
            logger.warning("the queue database's disk has space again")
            for returned in self._listeners:
                returned()


@contextmanager
def translated(location: str, space: PgSpace | None = None) -> Iterator[None]:
    """Run a statement or transaction; PostgreSQL's full disk and lost connections as the contract's errors
    (anything else, a unique key broken say, stays the driver's own)."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate == DISK_FULL:
            if space is not None:
                space.failed()
            raise StoreFull("the queue database's disk is full: nothing was stored; free space on it and "
                            "retry") from exc
        if exc.sqlstate in DAMAGED:
            raise StoreDamaged(f"the queue database {redacted(location)} reports damaged data ({_first_line(exc)}): "
                               "restore it from a backup (pg_dump) or repair it") from exc
        if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.QueryCanceled):
            raise StoreUnavailable(f"the queue database {redacted(location)} is unavailable: "
                                   f"{_first_line(exc)}") from exc
        raise
    else:
        if space is not None:
            space.succeeded()


Connection = psycopg.Connection[tuple[Any, ...]]


def live(db: Connection, used_at: float) -> bool:
    """False when ``db`` is closed, broken, or (unused since ``used_at``, `time.monotonic()`, for
    IDLE_PROBE_S or longer) ended by the server while idle."""
    if db.closed or db.broken:
        return False
    if time.monotonic() - used_at >= IDLE_PROBE_S:
        try:
            db.execute("")
        except psycopg.OperationalError:
            return False
    return True


@contextmanager
def begun(conn: Callable[[], Connection], fence: Callable[[Connection], None]) -> Iterator[Connection]:
    """One transaction on ``conn()``, fenced. A connection the server ended while idle shows it only at BEGIN,
    before anything of this transaction ran, so it is opened again there once (``conn()`` reconnects a broken
    one); a connection lost later is the caller's StoreUnavailable, rolled back whole by the server."""
    db = conn()
    tx = db.transaction()
    try:
        tx.__enter__()
    except psycopg.OperationalError:
        if not db.broken:
            raise
        db = conn()
        tx = db.transaction()
        tx.__enter__()
    with _entered(tx):
        fence(db)
        yield db


@contextmanager
def _entered(tx: AbstractContextManager[object]) -> Iterator[None]:
    """Leave an already entered transaction as a ``with`` would: commit, or roll back on an exception."""
    try:
        yield
    except BaseException as exc:
        if not tx.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        tx.__exit__(None, None, None)
