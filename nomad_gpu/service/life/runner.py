"""The runner of the life's transition function: it applies an event to an attempt's record
(`machine.apply`) and performs the effects in the order given, which keeps docs/reliability.md's
guarantees: the stored move first (compare-and-set, with its stop intent in the same transaction), then
the ledger, then what is followed in memory, then the calls to Nomad (handed to the executor).

It owns what the life cycle follows (the queued, admitted and running entries, and the ended attempts
still draining); `service/life/lifecycle.py` turns what happens into events and hands them here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.machine import apply
from nomad_gpu.service.life.outage import Outage
from nomad_gpu.service.life.record import Record, record_of
from nomad_gpu.service.life.timers import STOPS_CHECK_S, Timers
from nomad_gpu.service.life.tracking import Draining, Tracked, backoff_s, compact
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import StopIntent, Store

logger = logging.getLogger("nomad_gpu.service.life.lifecycle")


class Followed:
    """What the life cycle follows in memory, by entry (and the draining attempts, by Nomad job)."""

    def __init__(self) -> None:
        self.entries: dict[str, Tracked] = {}
        self.live: dict[str, Tracked] = {}
        """The admitted and running ones among `entries`."""
        self.waiting: dict[str, Tracked] = {}
        """The queued ones among `entries`: what each cycle reads, without scanning the running ones."""
        self.draining: dict[str, Draining] = {}
        """Ended attempts whose capacity waits for Nomad, by job."""


class Runner:
    def __init__(self, store: Store, ledger: Ledger, followed: Followed, *, clock: Callable[[], float],
                 metrics: Metrics, outage: Outage, timers: Timers, refusal_avoid_s: float,
                 register: Callable[[Tracked], None], stop: Callable[[str, str], None],
                 reserve: Callable[[EntryId, Team, Iterable[AllocPlacement]], None],
                 request: Callable[[Tracked], JobRequest | None], wake: Callable[[], None],
                 unhold: Callable[[EntryId], None]) -> None:
        """``register(t)``/``stop(job, namespace)``: hand a call to Nomad to the executor; ``reserve``: book
        capacity (a conflict logged); ``request(t)``: a queued entry's ask for the cycle; ``unhold(entry)``:
        drop the cycle's head-of-line hold."""
        self.store, self.ledger, self.clock, self.metrics, self.outage = store, ledger, clock, metrics, outage
        self.timers, self.refusal_avoid_s = timers, refusal_avoid_s
        self.register, self.stop, self.reserve, self.request = register, stop, reserve, request
        self.wake, self.unhold = wake, unhold
        self.entries, self.live = followed.entries, followed.live
        self.waiting, self.draining = followed.waiting, followed.draining

    def run(self, entry: QueueEntry, t: Tracked | None, record: Record, event: ev.Event) -> tuple[Record, QueueEntry]:
        """Apply one event to an entry's current attempt and perform the effects, in order. The ledger's word
        on the attempt's booking is read first (a restart books placements again at the resync)."""
        record = replace(record, booked=EntryId(entry.id) in self.ledger, held=entry.held)
        after, effects = apply(record, event)
        if t is None:
            return after, self.perform(entry, t, after, effects)
        previous, stored = t.record, t.entry
        t.record = after
        try:
            return after, self.perform(entry, t, after, effects)
        except Exception:
            # a store write refused (a full disk, a lost database) before the move took: nothing happened, so
            # the record stays as it was and the same report from Nomad (the next resync) is applied again
            if t.entry is stored and t.record is after:
                t.record = previous
            raise

    def perform(self, before: QueueEntry, t: Tracked | None, after: Record,
                 effects: Sequence[ev.Effect]) -> QueueEntry:
        """The effects of one event, in the order `apply` gave; the entry as stored afterwards."""
        moved, now, entry_id = before, self.clock(), before.id
        for fx in effects:
            if isinstance(fx, ev.Move):
                moved = self._move(before, fx, now)
                if t is not None:
                    t.entry = compact(moved, t.spec)[0] if moved.state is EntryState.QUEUED and t.spec else moved
            elif isinstance(fx, ev.Unhold):
                self.unhold(EntryId(entry_id))
            elif isinstance(fx, ev.Reject):
                raise InvalidRequest(fx.message)
            elif isinstance(fx, ev.Avoid):
                nodes = {NodeId(str(p["node"])) for p in before.placements} if fx.nodes else set()
                for node in nodes:
                    if t is not None:
                        t.avoid[node] = now + self.refusal_avoid_s
                logger.warning("entry %s: %s; re-queued%s", entry_id, _reason(effects),
                               f" away from {', '.join(sorted(nodes))}" if nodes else "")
            elif isinstance(fx, ev.Drain) and t is not None:
                held = self.ledger.release(EntryId(entry_id))
                if held is not None:
                    d = Draining(before.nomad_job_id, before.namespace, entry_id, dict(t.allocs), after)
                    self.draining[d.job_id] = d
                    self.reserve(d.key, held.team, held.placements)
            elif isinstance(fx, ev.Release):
                self.ledger.release(EntryId(entry_id))
            elif isinstance(fx, ev.Requeued) and t is not None and t.spec is not None:
                t.entry, t.allocs = compact(moved, t.spec)[0], {}
                t.record = record_of(t.entry)
                t.request = self.request(t)
                self.waiting[entry_id] = t
                self.live.pop(entry_id, None)
            elif isinstance(fx, (ev.Requeued, ev.Forget)):
                self.entries.pop(entry_id, None)
                self.waiting.pop(entry_id, None)
                self.live.pop(entry_id, None)
            elif isinstance(fx, ev.Stop):
                self.stop(before.nomad_job_id, before.namespace)
            elif isinstance(fx, ev.Wake):
                self.wake()
            elif isinstance(fx, ev.Count):
                self.metrics.finished.labels(fx.label).inc()
            elif t is not None:
                self._perform_live(t, fx, now)
        return moved

    def cancel_queued(self, entry_ids: Sequence[str], reason: str = "cancelled by user") -> set[str]:
        """Cancel those of ``entry_ids`` still queued, in one store commit (a sweep's thousands of trials):
        each through the transition function, the batch's moves written together by the store."""
        planned: dict[str, tuple[Record, tuple[ev.Effect, ...]]] = {}
        for entry_id in entry_ids:
            t = self.entries.get(entry_id)
            record = t.attempt if t is not None else Record(entry_id)
            after, effects = apply(record, ev.Cancel())
            if any(isinstance(fx, ev.Move) and fx.to is EntryState.CANCELLED for fx in effects):
                planned[entry_id] = after, effects
        moved = self.store.cancel_queued(list(planned), self.clock(), reason)
        for entry_id in moved:
            after, effects = planned[entry_id]
            t = self.entries.get(entry_id)
            if t is not None:
                t.record = after
            for fx in effects:
                if isinstance(fx, ev.Unhold):
                    self.unhold(EntryId(entry_id))
                elif isinstance(fx, ev.Forget):
                    self.entries.pop(entry_id, None)
                    self.waiting.pop(entry_id, None)
        return moved

    def _perform_live(self, t: Tracked, fx: ev.Effect, now: float) -> None:
        """The effects that only a followed, live attempt has."""
        if isinstance(fx, ev.Register):
            self.register(t)
        elif isinstance(fx, ev.MarkRegistered):
            self.outage.reachable()
            self.metrics.registered.inc()
            if self.store.mark_registered(t.entry.id, t.entry.attempts, now):
                t.entry = self.store.get(t.entry.id)
        elif isinstance(fx, ev.WatchDeadline):
            self.timers.watch_deadline(t)
        elif isinstance(fx, ev.RetryRegister):
            t.retry_at = now + (STOPS_CHECK_S if fx.soon else backoff_s(fx.failures))
            self.timers.schedule(t.retry_at, t.entry.id)
            if not fx.soon:
                logger.debug("register %s failed; retry in %.1f s with the same pins", t.entry.nomad_job_id,
                             t.retry_at - now)
        elif isinstance(fx, ev.Unreachable):
            self.outage.unreachable(fx.reason, "forbidden" if fx.forbidden else "unavailable")
        elif isinstance(fx, ev.Started):
            t.running_since = now
            self.timers.watch_runtime(t)
            if EntryId(t.entry.id) in self.ledger:
                self.ledger.confirm(EntryId(t.entry.id))

    def _move(self, e: QueueEntry, fx: ev.Move, now: float) -> QueueEntry:
        """A compare-and-set store write; an end carries its stop intent in the same transaction."""
        fields: dict[str, Any] = {"at": now}
        if fx.reason is not None:
            fields["reason"] = fx.reason
        if fx.held is not None:
            fields["held"] = fx.held
        if fx.requeue:
            fields.update(attempts=e.attempts + 1, placements=(), registered_at=None,
                          refusals=e.refusals + (1 if fx.refused else 0))
        elif fx.to.is_terminal():
            fields["finished_at"] = now
        stop = StopIntent(e.nomad_job_id, e.namespace, fx.reason or fx.to.value, now, 0, now) if fx.stop else None
        # an end that an allocation event told us is re-derived from Nomad's listing after a power loss:
        # it need not wait for the disk (and the service lock is held meanwhile)
        return self.store.transition(e.id, fx.to, expect=fx.expect, stop=stop, durable=fx.durable, **fields)

    def drain_event(self, d: Draining, event: ev.Event) -> bool:
        """Apply an event to a draining attempt; True when its capacity went back to the ledger."""
        d.record, effects = apply(d.record, event)
        freed = False
        for fx in effects:
            if isinstance(fx, ev.Stop):
                self.stop(d.job_id, d.namespace)
            elif isinstance(fx, ev.StopDone):
                self.store.stop_done(d.job_id, d.namespace)
            elif isinstance(fx, ev.ReleaseDrained):
                del self.draining[d.job_id]
                freed = self.ledger.release(d.key) is not None
                self.wake()  # capacity, or the entry's next attempt, may be free to go
        return freed



def _reason(effects: Sequence[ev.Effect]) -> str:
    return next((fx.reason or "" for fx in effects if isinstance(fx, ev.Move)), "")
