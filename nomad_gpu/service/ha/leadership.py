"""Which replica acts on Nomad: the leader (DESIGN 18). Every replica serves the API; only the leader runs the
watcher, the cycle, the actuator, stops, timers, MIG re-layouts and the usage poller.

On SQLite the service is one process on one file (its lock): it is always the leader, with no epoch
(`SoleLeader`). On PostgreSQL a `LeaseKeeper` thread campaigns for the lease (store/pglease.py) while
standing by, then renews it every lease/3 while leading:
- a renewal the database refuses because another replica holds a newer epoch deposes this one: the
  runtime fences its records and the process ends (as controller-runtime's leader election, which
  Kueue runs on, ends the manager when its lease is lost): a deposed leader never acts again on memory
  another leader has since made stale; its supervisor (Nomad's restart block) starts it again as a standby;
- a renewal that cannot reach the database leaves the lease to run out on its own clock (`writable()`
  turns false at lease minus the margin: every write to Nomad is then refused, service/life/fencing.py). When the
  database answers again the keeper takes the lease back, provided nobody led in between (the epoch it
  finds is still its own): the leader carries on with a resync, under the next epoch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from nomad_gpu.domain.errors import NomadGpuError
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.store.leaseterms import Holder, LeaseLost

if TYPE_CHECKING:
    from nomad_gpu.store.pglease import PgLease

logger = logging.getLogger(__name__)

CAMPAIGN_POLL_S = 0.25
"""How often a standby asks whether the lease is free: a killed leader's lock is gone at once, so this is
most of the time from a leader's death to the takeover."""


class NothingStarted(Exception):
    """Taking the lead failed before anything that acts on Nomad started: the lease can be handed back."""


class SoleLeader:
    """The one service on a SQLite file: always the leader, no epoch."""

    role = "leader"
    epoch: int | None = None

    def writable(self) -> bool:
        return True

    def leader_address(self) -> str:
        return ""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class LeaseKeeper:
    """A replica's campaign for, and hold on, the leader's lease, on a thread of its own."""

    def __init__(self, lease: PgLease, metrics: Metrics, *, elected: Callable[[int], None],
                 deposed: Callable[[str], None], regained: Callable[[int], None] = lambda _: None) -> None:
        """``elected(epoch)``: this replica now leads (build and start what acts on Nomad); ``regained(epoch)``:
        it leads again after its lease ran out while the database was unreachable, nobody having led in
        between; ``deposed(reason)``: another replica leads now."""
        self.lease = lease
        self.metrics = metrics
        self._elected, self._deposed, self._regained = elected, deposed, regained
        self.leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._holder = Holder(0, "")
        """Who leads, as the last campaign step read it."""
        self._unreachable = False
        metrics.leader.set(0)

    @property
    def role(self) -> str:
        """`leader` while this replica may act on Nomad; a leader whose lease ran out (the database unreachable)
        stands by until it takes the lease back."""
        return "leader" if self.writable() else "standby"

    @property
    def epoch(self) -> int | None:
        """The epoch this replica leads under; a standby reports the leader's it last read."""
        if self.leading:
            return self.lease.epoch
        return self._holder.epoch or None

    def writable(self) -> bool:
        """Whether this replica may write to Nomad now (checked just before every write)."""
        return self.leading and self.lease.valid()

    def leader_address(self) -> str:
        """The leader's API address (this replica's own while it leads); empty while nobody leads."""
        if self.leading:
            return self.lease.address
        return self._holder.address

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning and renewing; the lease's session ends, so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.lease.close()

    # ---- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except LeaseLost as exc:
                self._lost(str(exc))
                return
            except NomadGpuError as exc:  # the database is unreachable: the lease runs out on its own
                if not self._unreachable:
                    self._unreachable = True
                    logger.warning("the leader's lease cannot be %s: %s", "renewed" if self.leading else "read", exc)
            except Exception:  # a bug must not leave a leader renewing forever without acting, or the reverse
                logger.exception("the leader's lease failed; this replica stops leading")
                if self.leading:
                    self._lost("the lease's thread failed")
                    return
            # a leader whose session was lost takes its lease back as fast as a standby would take it
            fast = not self.leading or self.lease.lapsed
            self._stop.wait(CAMPAIGN_POLL_S if fast else self.lease.lease_s / 3)

    def _step(self) -> None:
        if not self.leading:
            if self.lease.try_acquire():
                self._reached()
                self.leading = True
                self._changed()
                logger.warning("this replica leads now (epoch %d)", self.lease.epoch or 0)
                try:
                    self._elected(self.lease.epoch or 0)
                except NothingStarted as exc:  # the database failed while the queue loaded: stand by again
                    logger.warning("taking the lead failed before anything started (%s): standing by again", exc)
                    self.lease.close()
                    self.leading = False
                    self._changed()
                except Exception as exc:  # half started: never lead on it; the process ends and starts again
                    logger.exception("taking the lead failed")
                    raise LeaseLost(f"taking the lead failed: {exc}") from exc
            else:
                self._reached()
                self._holder = self.lease.seen
            return
        before = self.lease.epoch
        self.lease.renew()
        self._reached()
        if self.lease.epoch != before:
            logger.warning("the leader's lease is held again (epoch %d after %d): nobody led in between",
                           self.lease.epoch or 0, before or 0)
            self._regained(self.lease.epoch or 0)

    def _reached(self) -> None:
        if self._unreachable:
            self._unreachable = False
            logger.warning("the leader's lease is reachable again")

    def _changed(self) -> None:
        self.metrics.leader.set(1 if self.leading else 0)
        self.metrics.leader_changes.inc()

    def _lost(self, reason: str) -> None:
        was = self.leading
        self.leading = False
        if was:
            self._changed()
            logger.warning("this replica no longer leads: %s", reason)
            self._deposed(reason)
