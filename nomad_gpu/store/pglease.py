"""The leader's lease on PostgreSQL: which one of several service replicas on one database acts on Nomad.

Two things together, both on a connection of the lease's own:
- a session-level advisory lock (`LEADER_LOCK`): the server drops it the moment the holder's session ends,
  so a killed leader (its socket closed by the kernel) is noticed at the next poll of a standby;
- a one-row table `leader_lease` with an epoch that only grows, the holder's backend pid and API address,
  and a renewal counter the leader bumps every lease/3.

A leader that is paused (SIGSTOP, a long stall) or cut off keeps its session, and with it the lock, for a
while. A standby therefore watches the renewal counter on its OWN monotonic clock: a value that has not
changed for a whole lease means the leader stopped renewing. It then ends the old session
(`pg_terminate_backend`, which needs the role to be allowed to signal the leader's backend: the same role,
or `pg_signal_backend`) and takes the lock and a new epoch in one transaction. Judging expiry on the
observer's clock rather than on timestamps written by the server is what Kubernetes' leader election does
(client-go `tools/leaderelection/leaderelection.go`, `observedTime`): no two clocks need to agree.

The leader, for its part, counts its lease from the moment it SENT the renewal (before the server stored
it, so before any standby could observe it) and stops writing to Nomad at lease minus a margin: by the time
a standby may take over, the old leader has stopped on its own (`valid`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import psycopg

from nomad_gpu.store.contract import StoreUnavailable
from nomad_gpu.store.leaseterms import Holder, LeaseLost
from nomad_gpu.store.pgconnect import APPLICATION_NAME, connect, translated

logger = logging.getLogger(__name__)

LEADER_LOCK = 0x6E67_7075_0003
"""The session-level advisory lock the leader holds ("ngpu" 3)."""
MARGIN = 0.2
"""The leader stops writing this share of the lease before a standby may take over (2 s of 10 s)."""
TERMINATE_WAIT_MS = 5000
"""How long a standby waits for the old leader's backend to exit (`pg_terminate_backend`'s timeout)."""

_ROW = "SELECT epoch, holder_pid, address, renewals, holder_app FROM leader_lease WHERE id = 1"


class NotLeader(StoreUnavailable):
    """A write of a replica whose epoch is no longer the lease's: refused, nothing written (503)."""


def epoch_check(epoch: Callable[[], int | None]) -> Callable[[psycopg.Connection[tuple[Any, ...]]], None]:
    """The fence of the leader's store writes: the first statement of each write transaction finds the lease row
    still at this replica's epoch, and keeps it so (`FOR KEY SHARE`) until the transaction ends. A takeover
    (`FOR UPDATE` on the row) therefore waits for the old leader's write in progress, and every write the old
    leader begins after it fails: a deposed replica, even one resumed after a pause mid-request, never stores a
    submission the new leader did not load. `KEY SHARE` does not hold up the leader's own renewals (which take
    `FOR NO KEY UPDATE`)."""

    def check(db: psycopg.Connection[tuple[Any, ...]]) -> None:
        mine = epoch()
        row = db.execute("SELECT 1 FROM leader_lease WHERE id = 1 AND epoch = %s FOR KEY SHARE", (mine,)).fetchone()
        if mine is None or row is None:
            raise NotLeader(f"this replica no longer leads (epoch {mine}): nothing was stored; retry (another "
                            "replica leads now)")

    return check


class PgLease:
    """One replica's side of the lease. Not thread-safe: one thread campaigns and renews; `valid()` may be
    read from any thread (it only compares two floats)."""

    def __init__(self, location: str, lease_s: float, address: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.location = location
        self.lease_s = lease_s
        self.address = address
        self._clock = clock
        self._db: psycopg.Connection[tuple[Any, ...]] | None = None
        self.epoch: int | None = None
        """The epoch this replica holds, or held last (None: never led)."""
        self._valid_until = 0.0
        self._seen: tuple[int, int] | None = None
        """The (epoch, renewals) a standby last observed, and since when on its own clock."""
        self._seen_at = 0.0
        self.seen = Holder(0, "")
        """The lease row as the last campaign step read it (a standby's view of who leads)."""
        self._pid = 0
        """The backend pid of the session that holds the lock (this replica's, while it leads)."""
        self._lapsed = False
        """The session that held the lock was lost: the lease is taken again, never just renewed."""

    # ---- both sides ------------------------------------------------------------------------------
    def _conn(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._db is None or self._db.closed or self._db.broken:
            self._db = connect(self.location)
            # a query stuck on a dead server must not hold the renewal thread past the lease
            self._db.execute(f"SET statement_timeout = {max(100, int(self.lease_s * 1000 / 3))}".encode())
        return self._db

    def holder(self) -> Holder:
        """The row as it stands (StoreUnavailable while the database cannot be reached)."""
        with translated(self.location):
            row = self._conn().execute(_ROW).fetchone()
        return Holder(0, "") if row is None else Holder(int(row[0]), str(row[2]))

    def close(self) -> None:
        """End the lease's session: the server drops the lock at once (a clean hand-over)."""
        if self._db is not None:
            self._db.close()
        self._valid_until = 0.0

    # ---- the leader -------------------------------------------------------------------------------
    @property
    def lapsed(self) -> bool:
        """The session that held the lock is gone: the lease must be taken back, not renewed."""
        return self._lapsed or self._db is None or self._db.closed or self._db.broken

    def valid(self) -> bool:
        """Whether this replica may still write to Nomad: it holds the lease and is short of lease - margin
        since the last renewal it sent."""
        return self._clock() < self._valid_until

    def remaining_s(self) -> float:
        return max(0.0, self._valid_until - self._clock())

    def renew(self) -> None:
        """Renew the lease held. LeaseLost when another replica took it; StoreUnavailable when the database
        cannot be reached (the lease then runs out on its own: `valid()` turns false)."""
        if self.epoch is None:
            raise LeaseLost("this replica never held the lease")
        if self._db is None or self._db.closed or self._db.broken:
            self._lapsed = True  # the session that held the lock is gone (or going): take the lease again
        if self._lapsed:
            self.try_acquire(expect=self.epoch)
            return
        sent = self._clock()
        with translated(self.location):
            done = self._conn().execute(
                "UPDATE leader_lease SET renewals = renewals + 1, renewed_at = clock_timestamp()"
                " WHERE id = 1 AND epoch = %s AND holder_pid = pg_backend_pid()", (self.epoch,))
        if done.rowcount != 1:
            self._valid_until = 0.0
            raise LeaseLost(f"the lease of epoch {self.epoch} was taken by another replica")
        self._valid_until = sent + self.lease_s * (1 - MARGIN)

    # ---- a standby --------------------------------------------------------------------------------
    def try_acquire(self, expect: int | None = None) -> bool:
        """One campaign step: take the lease when its holder's session ended, or when the holder stopped
        renewing a lease ago. Every session of the old holder is ended first (its lease's, and its store's,
        whose open write transaction, a leader paused mid-request, would otherwise keep the row locked), then
        the lock and the next epoch are taken in one transaction. True with `epoch` set to the new epoch.
        ``expect``: a leader taking its lease back after losing its session; LeaseLost unless the epoch is
        still its own (nobody led in between), and its own old session is ended without waiting."""
        sent = self._clock()
        with translated(self.location):
            db = self._conn()
            got = False
            try:
                with db.transaction():
                    got = _try_lock(db)
                    row = db.execute(_ROW).fetchone()  # no row lock yet: the leader's writes share the row
                    assert row is not None, "the lease row is made by the schema's migration"
                    epoch, pid, renewals, app = int(row[0]), int(row[1]), int(row[3]), str(row[4])
                    self.seen = Holder(epoch, str(row[2]))
                    if expect is not None and epoch != expect:
                        raise LeaseLost(f"the lease of epoch {expect} was taken by another replica (epoch {epoch})")
                    own = expect is not None and pid == self._pid
                    if not got and not own and not self._expired((epoch, renewals), sent):
                        return False
                    if not got:
                        logger.warning("the leader of epoch %d has not renewed its lease for %.1f s: ending its "
                                       "sessions", epoch, self.lease_s)
                    if (not got or app != APPLICATION_NAME) and (pid or app):
                        db.execute(f"SET LOCAL statement_timeout = {TERMINATE_WAIT_MS + 2000}".encode())
                        db.execute("SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity WHERE datname ="
                                   " current_database() AND pid <> pg_backend_pid() AND (pid = %s OR"
                                   " (application_name = %s AND %s <> %s))",
                                   (TERMINATE_WAIT_MS, pid, app, app, APPLICATION_NAME))
                    got = got or _try_lock(db)
                    if not got:
                        return False
                    row = db.execute(_ROW + " FOR UPDATE").fetchone()
                    if row is None or (int(row[0]), int(row[3])) != (epoch, renewals):
                        db.execute("SELECT pg_advisory_unlock(%s)", (LEADER_LOCK,))
                        got = False
                        return False  # renewed or taken meanwhile
                    mine = db.execute("UPDATE leader_lease SET epoch = %s, holder_pid = pg_backend_pid(), address = %s,"
                                      " lease_s = %s, renewals = 0, renewed_at = clock_timestamp(), holder_app = %s"
                                      " WHERE id = 1 RETURNING holder_pid",
                                      (epoch + 1, self.address, self.lease_s, APPLICATION_NAME)).fetchone()
            except psycopg.errors.QueryCanceled:  # a lock held past the statement timeout: not now
                self._unlock(db, got)
                return False
            except BaseException:
                self._unlock(db, got)  # a session lock outlives a rolled-back transaction
                raise
        self.epoch, self._pid, self._lapsed = epoch + 1, int(mine[0]) if mine else 0, False
        self._seen = None
        self._valid_until = sent + self.lease_s * (1 - MARGIN)
        return True

    @staticmethod
    def _unlock(db: psycopg.Connection[tuple[Any, ...]], got: bool) -> None:
        if got and not db.broken and not db.closed:
            db.execute("SELECT pg_advisory_unlock(%s)", (LEADER_LOCK,))

    def _expired(self, seen: tuple[int, int], now: float) -> bool:
        """Whether the holder's (epoch, renewals) has stood still for a whole lease on this replica's clock."""
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
            return False
        return now - self._seen_at >= self.lease_s


def _try_lock(db: psycopg.Connection[tuple[Any, ...]]) -> bool:
    row = db.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK,)).fetchone()
    return bool(row and row[0])


def default_address(listen: str) -> str:
    """The API address other replicas forward to when the operator names none: the listen address, with this
    host's name in place of a wildcard."""
    host = os.uname().nodename
    return listen.replace("0.0.0.0", host).replace("[::]", host)
