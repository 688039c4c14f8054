"""Opening the queue's SQLite file, and one transaction on it: the two places where the file itself can
say no (damaged, or its disk full) and where that is turned into the project's error tree.

A damaged file is refused before anything is read from it (StoreDamaged); a write the disk cannot hold is
a StoreFull, an Unavailable (503 with Retry-After), with nothing of it stored.
"""

from __future__ import annotations

import os
import sqlite3

from nomad_gpu.store.contract import StoreDamaged, StoreFull
from nomad_gpu.store.schema import migrate
from nomad_gpu.store.space import Space

__all__ = ["StoreDamaged", "StoreFull", "Transaction", "open_checked"]


def open_checked(path: str) -> sqlite3.Connection:
    """The connection, after SQLite's quick integrity check: a damaged file is StoreDamaged, never a
    queue that starts "ready" and then fails every cycle. A zero-length file is refused too: SQLite would
    take it for a new database, and the service would start an empty queue under a new job prefix while
    the jobs the lost one ran kept running, unmanaged."""
    if path != ":memory:" and os.path.exists(path) and os.path.getsize(path) == 0:
        raise StoreDamaged(f"the queue database {path} is empty (0 bytes), not a database: restore it from a "
                           "backup (nomad-gpu backup), or remove it to start an empty queue on purpose")
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
    try:
        db.row_factory = sqlite3.Row
        found = [str(r[0]) for r in db.execute("PRAGMA quick_check(5)").fetchall()]
        if found != ["ok"]:
            raise StoreDamaged(f"the queue database {path} is damaged ({'; '.join(found)[:300]}): restore it "
                               "from a backup (nomad-gpu backup)")
        if path != ":memory:":
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        migrate(db)
    except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed": the same verdict
        db.close()
        raise StoreDamaged(f"the queue database {path} is damaged ({exc}): restore it from a backup "
                           "(nomad-gpu backup)") from exc
    except BaseException:
        db.close()
        raise
    return db


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (the caller holds the store's lock).
    With ``space``, a write that fails for space and the first that succeeds after one are reported to it."""

    def __init__(self, db: sqlite3.Connection, space: Space | None = None) -> None:
        self._db = db
        self._space = space

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if (full := _full(exc)) is not None:
                if self._space is not None:
                    self._space.failed()
                raise full from exc
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        failed: BaseException | None = exc
        if kind is None:
            try:
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as commit_failed:  # a failed COMMIT leaves the transaction open
                failed = commit_failed
            else:
                if self._space is not None:
                    self._space.succeeded()
                return
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass  # SQLite rolled back already (it does after some errors)
        if isinstance(failed, sqlite3.OperationalError) and (full := _full(failed)) is not None:
            if self._space is not None:
                self._space.failed()
            raise full from failed
        if kind is None and failed is not None:
            raise failed


def _full(exc: sqlite3.OperationalError) -> StoreFull | None:
    """A full disk (or a page limit reached) as the tree's 503, or None for any other database error."""
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
        return StoreFull("the queue database's disk is full: nothing was stored; free space on it and retry")
    return None
