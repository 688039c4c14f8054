"""Whether the queue's disk is full, and the write-ahead log checkpointed on the way in and out.

SQLite checkpoints the log on its own only once it passes 1,000 pages (4 MB), and never shrinks the file:
on a small disk the log holds every version of every page written since the last checkpoint, takes any
space freed, and keeps the writes that would settle what Nomad says from ever fitting (issue 31, item 7).
So a write that fails for space checkpoints the log and truncates it (the pages it held go to the
database, once each, and the rest of the file back to the filesystem), and so does the first write that
succeeds again; that one also tells whoever waits for space (the watcher's resync) that it returned.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Space:
    """Called by each write transaction (`Transaction`) as it ends; the caller holds the store's lock."""

    def __init__(self, db: sqlite3.Connection, on_disk: bool) -> None:
        self._db = db
        self._on_disk = on_disk
        self.full = False
        self._listeners: list[Callable[[], None]] = []

    def listen(self, returned: Callable[[], None]) -> None:
        """Call ``returned`` (quick, never blocking) each time a write succeeds after one failed for space."""
        self._listeners.append(returned)

    def failed(self) -> None:
        if not self.full:
            self.full = True
            logger.warning("the queue database's disk is full: writes are refused until space is freed")
        self.checkpoint()  # the log may hold most of what is used: it may make room by itself

    def succeeded(self) -> None:
        if not self.full:
            return
        self.full = False
        self.checkpoint()
        logger.warning("the queue database's disk has space again")
        for returned in self._listeners:
            returned()

    def checkpoint(self) -> bool:
        """Copy the log into the database and truncate it; False when it could not complete (no room to
        grow the database, or a reader in the way): the log is then left as it was, whole and valid."""
        if not self._on_disk:
            return True
        try:
            busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.Error as exc:
            logger.debug("checkpoint failed: %s", exc)
            return False
        return not busy
