"""The one home of a queue entry's life (DESIGN 11 and 16): what happens, turned into events.

Every event (an admission, a register's reply, an allocation update, an evaluation, a user's cancel, hold
or re-queue, a timer, a stop confirmed, a dependency failed) is applied to the attempt's record by
`service/life/machine.py` `apply`, which decides; `service/life/runner.py` performs the effects it
returns, in the order given: the stored move (compare-and-set, with the stop intent in the same
transaction), the ledger, what is followed in memory, then the calls to Nomad (from the executor,
outside the lock). Nothing else moves an entry. Each event is safe to repeat (events are duplicated and
replayed, and a crash can strike between any two steps).

Its parts, each built with its dependencies: registers (`life/register.py`), stops (`life/stops.py`),
time (`life/timers.py`), allocations no entry claims (`life/foreign.py`).

The caller holds the service lock around every public method.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from nomad_gpu.domain.cycle import Admit
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.nomad.evaldecode import EvalInfo
from nomad_gpu.render import JobSpec
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.asks.classes import ClassBook
from nomad_gpu.service.asks.translate import job_request, placement_json, spec_of
from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.actuator import NomadActuator
from nomad_gpu.service.life.allocfeed import AllocFeed
from nomad_gpu.service.life.cutoff import CutOffWatch, bound_s
from nomad_gpu.service.life.foreign import ForeignAllocs
from nomad_gpu.service.life.machine import apply
from nomad_gpu.service.life.outage import Outage
from nomad_gpu.service.life.portsinuse import blocked_nodes, port_note, ports_taken, static_ports
from nomad_gpu.service.life.record import record_of
from nomad_gpu.service.life.register import Registrar
from nomad_gpu.service.life.runner import Followed, Runner
from nomad_gpu.service.life.stops import Stops
from nomad_gpu.service.life.timers import Timers
from nomad_gpu.service.life.tracking import LIVE, Draining, DueTimes, Executor, Tracked, compact, stored_drains
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import Admission, Store
from nomad_gpu.store.entries import entry_of_job, parse_job_id

logger = logging.getLogger(__name__)


class Lifecycle:
    def __init__(self, store: Store, ledger: Ledger, actuator: NomadActuator, *, lock: threading.RLock,
                 executor: Executor, clock: Callable[[], float], metrics: Metrics, outage: Outage,
                 wake: Callable[[], None], refusal_avoid_s: float = 300.0,
                 admission_deadline_s: float = 300.0, classes: ClassBook | None = None,
                 unhold: Callable[[EntryId], None] = lambda entry: None,
                 stop_on_client_after_s: float | None = None) -> None:
        """``unhold(entry)``: drop the cycle's head-of-line hold for an entry that ends or is held;
        ``stop_on_client_after_s``: the jobs' setting, which bounds how long a cut-off allocation's capacity
        stays booked (life/cutoff.py)."""
        self.store, self.ledger, self.actuator = store, ledger, actuator
        self.classes = classes or ClassBook()
        """Workload classes: their policy and the fleet's facts a class entry's tiers are built over."""
        self.lock, self.executor, self.clock, self.metrics = lock, executor, clock, metrics
        self.outage, self.wake = outage, wake
        self.instance = store.instance
        followed = Followed()
        self.entries, self.live, self.waiting = followed.entries, followed.live, followed.waiting
        self.draining = followed.draining
        self.port_notes: dict[str, str] = {}
        """Queued entries kept off nodes where one of their static ports is in use: why, for their reason."""
        self.inflight: set[str] = set()
        """Calls to Nomad on the executor (register, stop, settle), so that none is sent twice at once."""
        self.timers = Timers(clock, self.live, admission_deadline_s)
        self.foreign_allocs = ForeignAllocs(ledger)
        self.cut_off = CutOffWatch(bound_s(stop_on_client_after_s), self.instance)
        self.stops = Stops(store, actuator, lock=lock, executor=executor, outage=outage, clock=clock,
                           inflight=self.inflight, draining=self._awaits_stop, confirmed=self._stop_confirmed)
        self.registrar = Registrar(store, ledger, actuator, lock=lock, executor=executor, outage=outage,
                                   inflight=self.inflight, entries=self.entries, reply=self._reply)
        self.runner = Runner(store, ledger, followed, clock=clock, metrics=metrics, outage=outage, timers=self.timers,
                             refusal_avoid_s=refusal_avoid_s, register=self.registrar.start, stop=self.stops.start,
                             reserve=self.foreign_allocs.reserve, request=self._request, wake=wake, unhold=unhold)
        self.feed = AllocFeed(self.entries, self.draining, self.runner, self.stops, self.foreign_allocs, ledger,
                              metrics, self.instance, self.cut_off)

    @property
    def foreign(self) -> dict[str, AllocInfo]:
        return self.foreign_allocs.foreign

    @property
    def due(self) -> DueTimes:
        return self.timers.due

    def set_clocks(self, steady: Callable[[], float], started_at: float, started_steady: float,
                   wall_step: float) -> None:
        """The steady clock timers measure on, when this process started, and the wall-clock step measured
        while it was down (service/life/timers.py)."""
        t = self.timers
        t.steady, t.started_at, t.started_steady, t.wall_step = steady, started_at, started_steady, wall_step
        self.cut_off.steady = steady

    def _schedule(self, when: float, entry_id: str) -> None:
        self.timers.schedule(when, entry_id)

    def reserve(self, entry: EntryId, team: Team, placements: Iterable[AllocPlacement]) -> None:
        """Book capacity Nomad reports as taken (a restart's placements); a conflict is logged."""
        self.foreign_allocs.reserve(entry, team, placements)

    def start_stop(self, job_id: str, namespace: str) -> None:
        self.stops.start(job_id, namespace)

    # ---- start-up and submissions ------------------------------------------------------------
    def load(self) -> None:
        for e in self.store.list([EntryState.QUEUED, *LIVE]):
            self.track(e)
        for d in stored_drains(self.store.stops(), self.entries, self.instance, self.draining):
            self.draining[d.job_id] = d

    def track(self, e: QueueEntry, spec: JobSpec | None = None) -> None:
        """Follow a stored entry (`spec`: its spec, validated just now; else the stored one is). A spec that a
        newer validator rejects fails a queued entry with the reason, and leaves a live one tracked by its
        job (it must still end and release)."""
        if e.id in self.entries:
            return
        try:
            spec = spec if spec is not None else spec_of(e)
            request = job_request(e, spec, self.classes) if e.state is EntryState.QUEUED else None
            whole = spec
            if e.state is EntryState.QUEUED:  # waits held lean; the register loads the full spec
                e, spec = compact(e, spec)
            t = self.entries[e.id] = Tracked(e, spec, request, lean=spec is not whole)
            if e.state in LIVE:
                self.live[e.id] = t
                if e.registered_at is not None:
                    self.timers.watch_deadline(t)
                self.timers.watch_runtime(t)
                if e.state is EntryState.PREEMPTING:  # its stop again (idempotent): its confirmation ends it
                    self.stops.start(e.nomad_job_id, e.namespace)
            else:
                self.waiting[e.id] = t
        except (InvalidRequest, ValueError) as exc:
            reason = f"stored spec is no longer valid: {exc}"
            logger.error("entry %s: %s", e.id, reason)
            if e.state is EntryState.QUEUED:
                self.runner.run(e, None, record_of(e), ev.SpecInvalid(reason))
            else:
                self.entries[e.id] = self.live[e.id] = Tracked(e, None, None)

    def queued(self, now: float) -> list[Tracked]:
        out = []
        taken: dict[NodeId, set[int]] | None = None  # host ports in use, read once a cycle (portsinuse.py)
        self.port_notes = {}
        # a cut-off task, or an ended attempt's job not yet stopped (a refused job Nomad may still place), may still
        # run: the next attempt waits for it, so that an entry never runs twice at once
        waits = self.cut_off.waiting_entries() | {d.entry_id for d in self.draining.values()}
        for t in self.waiting.values():
            if t.entry.state is not EntryState.QUEUED or t.request is None or t.entry.held or t.entry.id in waits:
                continue
            if t.avoid and min(t.avoid.values()) <= now:
                t.avoid = {n: until for n, until in t.avoid.items() if until > now}
                t.request = self._request(t)
            elif self.classes.stale(t.entry.id, t.spec):  # tiers over the fleet as it now is
                t.request = self._request(t)
            if t.request is not None and (wanted := static_ports(t.spec)):
                taken = self._ports_taken() if taken is None else taken
                blocked = blocked_nodes(wanted, taken)
                avoid = frozenset(t.avoid) | blocked
                if avoid != t.request.avoid_nodes:
                    t.request = replace(t.request, avoid_nodes=avoid)
                if blocked:
                    names = {n.id: n.name for n in self.ledger.inventory if n.id in blocked}
                    self.port_notes[t.entry.id] = port_note(wanted, taken, blocked, names)
            out.append(t)
        return out

    def _ports_taken(self) -> dict[NodeId, set[int]]:
        allocs = [a for t in self.live.values() for a in t.allocs.values()]
        allocs += [a for d in self.draining.values() for a in d.allocs.values()] + list(self.foreign.values())
        pending = [(str(p["node"]), static_ports(t.spec)) for t in self.live.values()
                   if not any(not a.is_terminal for a in t.allocs.values()) for p in t.entry.placements]
        return ports_taken(allocs, pending)

    def _request(self, t: Tracked) -> JobRequest | None:
        if t.spec is None:
            return None
        return replace(job_request(t.entry, t.spec, self.classes), avoid_nodes=frozenset(t.avoid))


    # ---- what the executor and Nomad hand back ------------------------------------------------
    def _reply(self, attempt: QueueEntry, event: ev.Event) -> None:
        """A register's outcome (under the lock): to the draining attempt if it ended meanwhile."""
        self.registrar.done(attempt.id)
        d = self.draining.get(attempt.nomad_job_id)
        if d is not None:  # cancelled (or ended) while the register was in flight
            self.runner.drain_event(d, event)
            return
        t = self.entries.get(attempt.id)
        if t is None or t.entry.state not in LIVE or t.entry.attempts != attempt.attempts:
            return
        if isinstance(event, ev.RegisterRefused) and event.reason:
            logger.warning("register %s refused: %s", attempt.nomad_job_id, event.reason)
        self.runner.run(t.entry, t, t.attempt, event)

    def _preempting(self, job_id: str) -> Tracked | None:
        t = self.entries.get(entry_of_job(job_id) or "")
        ok = t is not None and t.entry.state is EntryState.PREEMPTING and t.entry.nomad_job_id == job_id
        return t if ok else None

    def _awaits_stop(self, job_id: str) -> bool:
        """Whether the job's capacity waits for its stop (draining, or preempting): its allocations are read."""
        return job_id in self.draining or self._preempting(job_id) is not None

    def _stop_confirmed(self, job_id: str, allocs: tuple[AllocInfo, ...]) -> None:
        # a cut-off allocation's task may still run: not ended for the stop (life/cutoff.py)
        confirmed = ev.StopConfirmed(tuple((a.id, a.is_terminal and not a.cut_off) for a in allocs))
        if (t := self._preempting(job_id)) is not None:
            for a in allocs:
                t.allocs.setdefault(a.id, a)
            self.runner.run(t.entry, t, t.attempt, confirmed)
        d = self.draining.get(job_id)
        if d is not None:
            for a in allocs:
                d.allocs.setdefault(a.id, a)
            self.runner.drain_event(d, confirmed)

    # ---- admit -------------------------------------------------------------------------------
    def admit(self, admits: Iterable[Admit], now: float) -> int:
        """Store a cycle's admissions as one transaction, then register each. On a storage error the
        cycle's reservations are given back and every entry stays queued."""
        admits = list(admits)
        if not admits:
            return 0
        try:
            moved = self.store.admit_many([Admission(a.entry, self._placements_json(a)) for a in admits], at=now)
        except Exception as exc:
            for a in admits:
                self.ledger.release(EntryId(a.entry))
            logger.error("admissions of this cycle rolled back: %s", exc)
            return 0
        for e in moved:  # the batch above is the `Move` of each admission, in one transaction
            t = self.live[e.id] = self.entries[e.id]
            self.waiting.pop(e.id, None)
            t.entry, t.allocs, t.retry_at = e, {}, 0.0
            t.record, effects = apply(replace(t.attempt, held=False), ev.Admit(len(e.placements)))
            self.metrics.admitted.inc()
            self.metrics.observe_wait(now - e.submitted_at)  # after the commit: a rolled-back cycle waits on
            self.runner.perform(e, t, t.record, [fx for fx in effects if not isinstance(fx, ev.Move)])
        return len(moved)

    def _placements_json(self, a: Admit) -> tuple[dict[str, Any], ...]:
        """An admission's placements as stored, each with what a workload class chose and why."""
        t = self.entries.get(a.entry)
        spec = t.spec if t is not None else None
        return tuple(placement_json(p, self.classes.choice_in(spec, p, self.ledger)) for p in a.placements)

    def start_register(self, t: Tracked) -> None:
        """A resync found the attempt's register never acknowledged: send it again (create-only)."""
        if t.spec is not None:
            self.runner.run(t.entry, t, t.attempt, ev.Resume())

    # ---- Nomad's allocations -----------------------------------------------------------------
    def on_alloc(self, a: AllocInfo, *, force: bool = False) -> bool:
        """Apply one allocation update; True when capacity was freed (service/life/allocfeed.py)."""
        return self.feed.on_alloc(a, force=force)

    # ---- Nomad's evaluations ---------------------------------------------------------------
    def on_eval(self, e: EvalInfo) -> None:
        """Nomad could not place an admitted job (a blocked evaluation, FailedTGAllocs): its constraint,
        driver or CPU the core did not know about. Stop it, give the capacity back, and queue it again
        with Nomad's reason, away from that node for a while; this does not use up a retry.

        The refusal may come before the register's reply (the evaluation is processed while the reply
        is on its way): the attempt ends all the same, and its job is stopped after the reply.
        The job ID names the attempt, so the evaluation cannot be an older attempt's."""
        ref = parse_job_id(e.job_id)
        t = self.entries.get(ref.entry) if ref is not None and ref.instance in ("", self.instance) else None
        if t is None or t.entry.nomad_job_id != e.job_id or not e.refused:
            return
        # a failed evaluation is the scheduler giving up, not the node refusing, and a pinned GPU that turned
        # unhealthy is refused by itself (the ledger offers it no more): either way the node stays a candidate
        avoid = e.status != "failed" and self.registrar.sick_pins(t.entry) is None
        self.runner.run(t.entry, t, t.attempt, ev.EvalRefused(e.failures or e.status, avoid=avoid))

    # ---- a user's requests ---------------------------------------------------------------------
    def _request_event(self, entry_id: str, event: ev.Event) -> QueueEntry:
        entry = self.store.get(entry_id)
        t = self.entries.get(entry_id)
        if t is None and entry.state in LIVE:
            return entry  # not followed (cannot happen once loaded): nothing here to move
        record = t.attempt if t is not None else record_of(entry)
        if record.state is not entry.state or record.attempt != entry.attempts:  # the store has the last word
            record = replace(record_of(entry), registering=record.registering, failures=record.failures)
        return self.runner.run(entry, t, record, event)[1]

    def cancel(self, entry_id: str) -> QueueEntry:
        return self._request_event(entry_id, ev.Cancel())

    def apply_event(self, t: Tracked, event: ev.Event) -> None:
        """An event the service decided on for a followed entry (a preemption, service/loops/preemption.py)."""
        self.runner.run(t.entry, t, t.attempt, event)

    def cancel_queued(self, entry_ids: Sequence[str], reason: str = "cancelled by user") -> set[str]:
        """Cancel those of ``entry_ids`` still queued, in one store commit (a sweep's thousands of trials)."""
        return self.runner.cancel_queued(entry_ids, reason)

    def dependency_failed(self, entry_id: str, reason: str) -> QueueEntry:
        """A queued entry whose `after:` dependency ended badly ends without running (`dependencies.py`)."""
        return self._request_event(entry_id, ev.DependencyFailed(reason))

    def hold(self, entry_id: str, held: bool) -> QueueEntry:
        """Hold (or release) a queued entry: it keeps its place in the order but is not admitted."""
        return self._request_event(entry_id, ev.Hold(held))

    def requeue(self, entry_id: str) -> QueueEntry:
        """Stop a live attempt and queue the entry again (no retry used); a queued entry stays as it is."""
        return self._request_event(entry_id, ev.Requeue())

    def reclaim(self, entry_id: str, reason: str, *, requeue: bool) -> QueueEntry:
        """Take a live attempt's GPUs back (idle reclaim): it drains while Nomad stops it, then ends
        `reclaimed`, or (`requeue`) is queued again with no retry used."""
        return self._request_event(entry_id, ev.Reclaim(reason, requeue=requeue))

    def set_priority(self, entry_id: str, priority: int) -> QueueEntry:
        """Not a move: the entry stays in its state, with another priority."""
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 100:
            raise InvalidRequest("priority must be an integer from 1 to 100")
        entry = self.store.get(entry_id)
        if entry.state.is_terminal():
            raise InvalidRequest(f"{entry_id} is {entry.state.value}: its priority no longer matters")
        moved = self.store.transition(entry_id, entry.state, expect=(entry.state,), priority=priority,
                                      at=self.clock(), reason=entry.reason)
        if (t := self.entries.get(entry_id)) is not None:
            t.entry = moved
            if moved.state is EntryState.QUEUED and t.spec is not None:
                t.entry = compact(moved, t.spec)[0]
                t.request = self._request(t)
        self.wake()
        return moved

    # ---- what a resync or a timer tells -------------------------------------------------------
    def on_job_gone(self, t: Tracked) -> None:
        """A live attempt's job was deregistered by someone else before any allocation."""
        self.runner.run(t.entry, t, t.attempt, ev.JobDeregistered())

    def settle(self, t: Tracked, event: ev.JobGone | ev.JobDead) -> None:
        """A live attempt Nomad's listing does not show: its job is gone, or dead without allocations."""
        self.runner.run(t.entry, t, t.attempt, event)

    def fence(self) -> None:
        """This replica lost the leader's lease: every attempt it follows is fenced (`LeaseLost`) and forgotten
        here, nothing is written; the next leader loads them from the store and reads Nomad."""
        with self.lock:
            for t in list(self.entries.values()):
                self.runner.run(t.entry, t, t.attempt, ev.LeaseLost())
            self.draining.clear()

    def allocs_gone(self, d: Draining) -> None:
        """A resync lists nothing of a draining attempt's stopped job: every allocation of it is gone. Not a cut-off
        one's task, which may run on unseen: its bound frees it (life/cutoff.py)."""
        if any(alloc_id in self.cut_off.seen for alloc_id in d.allocs):
            return
        d.allocs.clear()
        self.runner.drain_event(d, ev.AllocsGone())

    def tick(self, now: float) -> None:
        """Retry what is due: registers whose reply failed (same pins), stops not yet confirmed; re-queue
        admitted entries Nomad has not placed within the admission deadline; end attempts past their
        wall-time limit. Only entries whose time has come are looked at (each is checked against its
        current state, so a stale due time does nothing)."""
        for entry_id in self.timers.due_now():
            t = self.live.get(entry_id)
            fired = self.timers.fired(t, now) if t is not None else None
            if t is not None and fired is not None:
                self.runner.run(t.entry, t, t.attempt, fired)
        for alloc_id, job_id in self.cut_off.due():  # a cut-off task surely stopped by now (life/cutoff.py)
            if (d := self.draining.get(job_id)) is not None:
                self.runner.drain_event(d, ev.CutOffExpired(alloc_id))
            if self.foreign_allocs.release_cut_off(alloc_id):  # booked by itself (a drain rebuilt at a restart too)
                self.wake()
        unstepped = self.timers.stops_due(now)
        if unstepped is not None:
            for s in self.store.stops(due_by=unstepped):
                self.start_stop(s.job_id, s.namespace)
