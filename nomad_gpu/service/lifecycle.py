"""The one home of a queue entry's life (DESIGN 3.11): its stored state, its reservation in the
ledger and the calls to Nomad change here, together, and nowhere else.

One method per event: `admit`, `registered` (inside `_register`), `on_alloc`, `cancel`, `settle`,
`stop` and the retries in `tick`. Each is safe to repeat (events are duplicated and replayed, a crash
can strike between any two steps), and every stored move is a compare-and-set.

Rules that keep a GPU from being handed out twice:
- An attempt that ends (completed, failed, interrupted, cancelled) stores its outcome and the intent
  to stop its Nomad job in one transaction; the stop is then retried with backoff until Nomad
  confirms, across restarts.
- An attempt that did not end cleanly keeps its capacity ("draining", keyed by its Nomad job) until
  its job is stopped and every allocation Nomad made for it is terminal, so a replacement Nomad
  places (a migration, an `alloc stop`) can never land on GPUs given to the next job.
- A register in flight is never raced: a cancel waits for it, and the stop follows its reply.
- Registers are create-only and keep their pins on a retryable error; an attempt whose register
  Nomad acknowledged is never registered again (a job gone after a restart ran and was collected).

Stopping an ended attempt's job and releasing its capacity live in `stops.py`, what happens when time
passes (retries, deadlines, wall-time limits) in `timers.py`, the booking of allocations no entry
claims in `foreign.py`: mixins of this class.

The caller holds the service lock around every public method; Nomad is called only from the
executor, outside the lock.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from nomad_gpu.domain.cycle import Admit
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.nomad.client import NomadError, NomadForbidden
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus, EvalInfo
from nomad_gpu.render import JobSpec, RenderError
from nomad_gpu.service.actuator import NomadActuator
from nomad_gpu.service.classes import ClassBook, resolved
from nomad_gpu.service.foreign import ForeignAllocs
from nomad_gpu.service.metrics import Metrics
from nomad_gpu.service.outage import Outage
from nomad_gpu.service.pins import pin_mismatch
from nomad_gpu.service.portsinuse import blocked_nodes, port_note, ports_taken, static_ports
from nomad_gpu.service.preempted import requeue_preempted
from nomad_gpu.service.stops import Stops
from nomad_gpu.service.timers import STOPS_CHECK_S, Timers
from nomad_gpu.service.tracking import LIVE, Draining, DueTimes, Executor, NotSent, Tracked, backoff_s, compact
from nomad_gpu.service.translate import job_request, placement_from_json, placement_json, render_placement, spec_of
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import Admission, StopIntent, Store
from nomad_gpu.store.entries import parse_job_id

logger = logging.getLogger(__name__)

_ALLOC_INDEX_MAX = 10_000
"""Allocations whose last index is remembered (to drop stale replays): only recent ones can be replayed."""


class Lifecycle(ForeignAllocs, Stops, Timers):
    def __init__(self, store: Store, ledger: Ledger, actuator: NomadActuator, *, lock: threading.RLock,
                 executor: Executor, clock: Callable[[], float], metrics: Metrics, outage: Outage,
                 wake: Callable[[], None], refusal_avoid_s: float = 300.0,
                 admission_deadline_s: float = 300.0, classes: ClassBook | None = None) -> None:
        self.store, self.ledger, self.actuator = store, ledger, actuator
        self.classes = classes or ClassBook()
        """Workload classes: their policy and the fleet's facts a class entry's tiers are built over."""
        self.refusal_avoid_s, self.admission_deadline_s = refusal_avoid_s, admission_deadline_s
        self.lock, self.executor, self.clock, self.metrics = lock, executor, clock, metrics
        self.outage, self.wake = outage, wake
        self.instance = store.instance
        self.entries: dict[str, Tracked] = {}
        self.live: dict[str, Tracked] = {}
        """The admitted and running ones among `entries`."""
        self.waiting: dict[str, Tracked] = {}
        self.port_notes: dict[str, str] = {}
        """Queued entries kept off nodes where one of their static ports is in use: why, for their reason."""
        """The queued ones among `entries`: what each cycle reads, without scanning the running ones."""
        self.due = DueTimes()
        self._stops_checked = 0.0
        self.draining: dict[str, Draining] = {}
        self.foreign: dict[str, AllocInfo] = {}
        self._alloc_index: OrderedDict[str, int] = OrderedDict()
        self.inflight: set[str] = set()

    # ---- start-up and submissions ------------------------------------------------------------
    def load(self) -> None:
        for e in self.store.list([EntryState.QUEUED, *LIVE]):
            self.track(e)

    def track(self, e: QueueEntry, spec: JobSpec | None = None) -> None:
        """Follow a stored entry (`spec`: its spec, validated just now; else the stored one is). A spec that a
        newer validator rejects fails a queued entry with the reason, and leaves a live one tracked by its
        job (it must still end and release)."""
        if e.id in self.entries:
            return
        try:
            spec = spec if spec is not None else spec_of(e)
            request = job_request(e, spec, self.classes) if e.state is EntryState.QUEUED else None
            if e.state is EntryState.QUEUED:  # waits held lean; the register loads the full spec
                e, spec = compact(e, spec)
            t = self.entries[e.id] = Tracked(e, spec, request)
            if e.state in LIVE:
                self.live[e.id] = t
                if e.registered_at is not None:
                    self._watch_deadline(t)
                self._watch_runtime(t)
            else:
                self.waiting[e.id] = t
        except (InvalidRequest, ValueError) as exc:
            reason = f"stored spec is no longer valid: {exc}"
            logger.error("entry %s: %s", e.id, reason)
            if e.state is EntryState.QUEUED:
                now = self.clock()
                self.store.transition(e.id, EntryState.FAILED, expect=(EntryState.QUEUED,), finished_at=now, at=now,
                                      reason=reason)
            else:
                self.entries[e.id] = self.live[e.id] = Tracked(e, None, None)

    def queued(self, now: float) -> list[Tracked]:
        out = []
        taken: dict[NodeId, set[int]] | None = None  # host ports in use, read once a cycle (portsinuse.py)
        self.port_notes = {}
        for t in self.waiting.values():
            if t.entry.state is not EntryState.QUEUED or t.request is None or t.entry.held:
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
        for e in moved:
            t = self.live[e.id] = self.entries[e.id]
            self.waiting.pop(e.id, None)
            t.entry, t.allocs, t.failures, t.retry_at = e, {}, 0, 0.0
            self.metrics.admitted.inc()
            self.metrics.observe_wait(now - e.submitted_at)  # after the commit: a rolled-back cycle waits on
            self.start_register(t)
        return len(moved)

    def _placements_json(self, a: Admit) -> tuple[dict[str, Any], ...]:
        """An admission's placements as stored, each with what a workload class chose and why."""
        t = self.entries.get(a.entry)
        spec = t.spec if t is not None else None
        return tuple(placement_json(p, self.classes.choice_in(spec, p, self.ledger)) for p in a.placements)

    def start_register(self, t: Tracked) -> None:
        key = f"register:{t.entry.id}"
        if key in self.inflight or t.spec is None:
            return
        self.inflight.add(key)
        t.registering = True
        self.executor.submit(self._register, t.entry)

    def _register(self, admitted: QueueEntry) -> None:
        """Executor: register one attempt (create-only), then apply the reply under the lock. The stored
        state is checked first: an attempt cancelled before its turn is never sent."""
        with self.lock:
            t = self.entries.get(admitted.id)
            if (t is None or t.entry.state is not EntryState.ADMITTED or t.entry.attempts != admitted.attempts
                    or t.spec is None):
                self._register_done(admitted.id, admitted.nomad_job_id)
                self._registered(admitted, NotSent())
                return
            if self.outage.down and t.failures == 0:
                # admitted just before the pause, still in the pool when another register met the outage
                # (a burst of a cycle's admissions into one second of it): it waits, pins kept, until
                # Nomad answers again; a register that failed itself retries on its own backoff
                self._register_done(admitted.id, admitted.nomad_job_id)
                t.retry_at = self.clock() + STOPS_CHECK_S
                self._schedule(t.retry_at, admitted.id)
                return
            entry = t.entry
            entry_id = entry.id
            first = self.ledger.node_free(NodeId(str(entry.placements[0]["node"]))) if entry.placements else None
            pool = first.node.node_pool if first is not None else None
            devices = [InstanceId(i) for p in entry.placements for i in p.get("instance_ids") or ()]
            vendor = (first.node.vendor_of(devices[0]) if first is not None and devices else None) or "nvidia"
        failure: Exception | None = None
        try:
            spec = spec_of(self.store.get(entry_id))  # the full spec: a waiting entry is held without env/args
            placements = [placement_from_json(p) for p in entry.placements]
            spec = resolved(spec, placements)  # a class's choice written in as the kind it chose
            self.actuator.submit(entry, spec, render_placement(spec, placements, pool, vendor))
        except (NomadError, RenderError, InvalidRequest) as exc:
            failure = exc
        with self.lock:
            self._register_done(entry_id, entry.nomad_job_id)
            self._registered(entry, failure)

    def _register_done(self, entry_id: str, job_id: str | None) -> None:
        self.inflight.discard(f"register:{entry_id}")
        t = self.entries.get(entry_id)
        if t is not None:
            t.registering = False
        d = self.draining.get(job_id or "")
        if d is not None:
            d.register_in_flight = False

    def _registered(self, entry: QueueEntry, failure: Exception | None) -> None:
        job_id, now = entry.nomad_job_id, self.clock()
        retryable = isinstance(failure, NomadError) and failure.retryable
        d = self.draining.get(job_id)
        if d is not None:  # cancelled (or ended) while the register was in flight
            if failure is None or retryable:
                self.start_stop(d.job_id, d.namespace)  # the job may exist now: stop it after the register
            else:
                self.store.stop_done(d.job_id, d.namespace)
                d.stopped = True
                self.maybe_release(d)
            return
        t = self.entries.get(entry.id)
        if t is None or t.entry.state not in LIVE or t.entry.attempts != entry.attempts:
            return
        if failure is None:  # the attempt may be running already: its events can beat the reply
            self.outage.reachable()
            self.metrics.registered.inc()
            if self.store.mark_registered(entry.id, entry.attempts, now):
                t.entry = self.store.get(entry.id)
                self._watch_deadline(t)
            return
        if retryable:
            t.failures += 1
            t.retry_at = now + backoff_s(t.failures)
            self._schedule(t.retry_at, entry.id)
            self.outage.unreachable(str(failure), "forbidden" if isinstance(failure, NomadForbidden) else "unavailable")
            logger.debug("register %s failed (%s); retry in %.1f s with the same pins", job_id, failure,
                         t.retry_at - now)
            return
        logger.warning("register %s refused: %s", job_id, failure)
        self.end(t, EntryState.FAILED, f"Nomad refused the job: {failure}", stop_job=False)

    # ---- Nomad's allocations -----------------------------------------------------------------
    def on_alloc(self, a: AllocInfo, *, force: bool = False) -> bool:
        """Apply one allocation update; True when capacity was freed."""
        last = self._alloc_index.get(a.id)
        if last is not None and a.modify_index and a.modify_index < last and not force:
            return False  # a stale replay (the stream's index is inclusive and may rewind)
        self._alloc_index[a.id] = max(a.modify_index, last or 0)
        self._alloc_index.move_to_end(a.id)
        if len(self._alloc_index) > _ALLOC_INDEX_MAX:
            self._alloc_index.popitem(last=False)
        d = self.draining.get(a.job_id)
        if d is not None:
            d.allocs[a.id] = a
            return self.maybe_release(d)
        ref = parse_job_id(a.job_id)
        t = self.entries.get(ref.entry) if ref is not None and ref.instance in ("", self.instance) else None
        if t is None or t.entry.nomad_job_id != a.job_id or t.entry.state not in LIVE:
            if ref is not None and ref.instance == self.instance and not a.is_terminal:
                self._stop_orphan(a)
            return self._foreign_alloc(a)
        known = t.allocs.get(a.id)
        if not a.resources_known and known is not None and known.ports:  # a stub keeps the ports Nomad gave
            a = replace(a, ports=known.ports)
        t.allocs[a.id] = a
        short = pin_mismatch(a, t.entry.placements)
        if short is not None:  # Nomad before 1.11.1 places a taken pin short (pins.py): never run it so
            self.metrics.pin_mismatches.inc()
            self._refused(t, short, self.clock())
            return EntryId(t.entry.id) not in self.ledger
        if not a.is_terminal and t.entry.state is EntryState.ADMITTED:
            t.entry = self.store.transition(t.entry.id, EntryState.RUNNING, expect=(EntryState.ADMITTED,),
                                            at=self.clock(), durable=False)
            t.running_since = self.clock()
            self._watch_runtime(t)
            if EntryId(t.entry.id) in self.ledger:
                self.ledger.confirm(EntryId(t.entry.id))
        if not a.is_terminal:
            return False
        if a.max_run_exceeded:  # Nomad (2.0.3+) ended it at max_runtime itself: the timer's outcome, no retry
            limit = t.spec.max_runtime if t.spec is not None else None
            within = f" ({limit:g} s)" if limit else ""
            self.end(t, EntryState.FAILED, f"timeout: Nomad ended it at max_runtime{within} (max_run_duration)",
                     durable=False)
            self.metrics.finished.labels("timeout").inc()
            return EntryId(t.entry.id) not in self.ledger
        if a.preempted_by:  # Nomad evicted it for a higher-priority job: queued again, no retry used
            requeue_preempted(self, t, a)
            return EntryId(t.entry.id) not in self.ledger
        if not a.succeeded:  # one member failed, was lost or was interrupted: the attempt ends
            self._retry_or_fail(t, f"allocation {a.outcome()}", durable=False)
            return EntryId(t.entry.id) not in self.ledger
        done = [x for x in t.allocs.values() if x.is_terminal]
        if len(done) >= max(len(t.entry.placements), 1):
            # every allocation ended by itself, successfully: a batch job Nomad will not replace, so its job
            # is left as Nomad keeps it (dead, complete) and no stop round trip is spent on it. A service job's
            # task that exited 0 ends `failed` (AllocInfo.succeeded), which a reschedule policy may replace:
            # that job is stopped and its GPUs drain until Nomad confirms.
            clean = all(x.client_status is AllocStatus.COMPLETE for x in done)
            self.end(t, EntryState.COMPLETE, "", release_now=clean, stop_job=not clean, durable=False)
            self.metrics.finished.labels("complete").inc()
            return True
        return False

    # ---- Nomad's evaluations ---------------------------------------------------------------
    def on_eval(self, ev: EvalInfo) -> None:
        """Nomad could not place an admitted job (a blocked evaluation, FailedTGAllocs): its constraint,
        driver or CPU the core did not know about. Stop it, give the capacity back, and queue it again
        with Nomad's reason, away from that node for a while; this does not use up a retry.

        The refusal may come before the register's reply (the evaluation is processed while the reply
        is on its way): the attempt ends all the same, and its job is stopped after the reply (`end`).
        The job ID names the attempt, so the evaluation cannot be an older attempt's."""
        ref = parse_job_id(ev.job_id)
        t = self.entries.get(ref.entry) if ref is not None and ref.instance in ("", self.instance) else None
        if (t is None or t.entry.nomad_job_id != ev.job_id or t.entry.state is not EntryState.ADMITTED
                or not ev.refused):
            return
        # a failed evaluation is the scheduler giving up, not the node refusing: that node stays a candidate
        self._refused(t, f"Nomad could not place it: {ev.failures or ev.status}", self.clock(),
                      avoid=ev.status != "failed")

    def _refused(self, t: Tracked, why: str, now: float, *, avoid: bool = True) -> None:
        nodes = {NodeId(str(p["node"])) for p in t.entry.placements} if avoid else set()
        for node in nodes:
            t.avoid[node] = now + self.refusal_avoid_s
        logger.warning("entry %s: %s; re-queued%s", t.entry.id, why,
                       f" away from {', '.join(sorted(nodes))}" if nodes else "")
        self.end(t, EntryState.QUEUED, why, refused=True)
        self.metrics.finished.labels("refused").inc()

    # ---- ends --------------------------------------------------------------------------------
    def cancel(self, entry_id: str) -> QueueEntry:
        entry = self.store.get(entry_id)
        if entry.state.is_terminal():
            return entry
        t = self.entries.get(entry_id)
        if entry.state is EntryState.QUEUED or t is None:
            now = self.clock()
            moved = self.store.transition(entry_id, EntryState.CANCELLED, expect=(EntryState.QUEUED,),
                                          finished_at=now, at=now, reason="cancelled by user")
            self.entries.pop(entry_id, None)
            self.waiting.pop(entry_id, None)
            return moved
        return self.end(t, EntryState.CANCELLED, "cancelled by user")

    def dependency_failed(self, entry_id: str, reason: str) -> QueueEntry:
        """A queued entry whose `after:` dependency ended badly ends without running (`dependencies.py`)."""
        now = self.clock()
        moved = self.store.transition(entry_id, EntryState.DEPENDENCY_FAILED, expect=(EntryState.QUEUED,),
                                      finished_at=now, at=now, reason=reason)
        self.entries.pop(entry_id, None)
        self.waiting.pop(entry_id, None)
        self.metrics.finished.labels(EntryState.DEPENDENCY_FAILED.value).inc()
        return moved

    def hold(self, entry_id: str, held: bool) -> QueueEntry:
        """Hold (or release) a queued entry: it keeps its place in the order but is not admitted."""
        entry = self.store.get(entry_id)
        if entry.state is not EntryState.QUEUED:
            raise InvalidRequest(f"{entry_id} is {entry.state.value}: only a queued entry can be "
                                 f"{'held' if held else 'released'}")
        if entry.held == held:
            return entry
        moved = self.store.transition(entry_id, EntryState.QUEUED, expect=(EntryState.QUEUED,), held=held,
                                      at=self.clock(), reason="held by user" if held else "released by user")
        if (t := self.entries.get(entry_id)) is not None and t.spec is not None:
            t.entry = compact(moved, t.spec)[0]
        self.wake()
        return moved

    def requeue(self, entry_id: str) -> QueueEntry:
        """Stop a live attempt and queue the entry again (no retry used); a queued entry stays as it is."""
        entry = self.store.get(entry_id)
        if entry.state.is_terminal():
            raise InvalidRequest(f"{entry_id} is {entry.state.value}: submit it again instead")
        t = self.entries.get(entry_id)
        if entry.state is EntryState.QUEUED or t is None:
            return entry
        return self.end(t, EntryState.QUEUED, "re-queued by user", refused=True)

    def set_priority(self, entry_id: str, priority: int) -> QueueEntry:
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

    def on_job_gone(self, t: Tracked) -> None:
        """A live attempt's job was deregistered by someone else before any allocation."""
        self._retry_or_fail(t, "its Nomad job was stopped outside nomad-gpu")

    def _retry_or_fail(self, t: Tracked, why: str, durable: bool = True) -> None:
        if t.entry.retries_used < t.entry.max_retries:
            self.end(t, EntryState.QUEUED, f"retrying after {why}", durable=durable)
            self.metrics.finished.labels("retried").inc()
        else:
            self.end(t, EntryState.FAILED, why, durable=durable)
            self.metrics.finished.labels("failed").inc()

    def end(self, t: Tracked, to: EntryState, reason: str, *, release_now: bool = False,
            stop_job: bool = True, refused: bool = False, durable: bool = True) -> QueueEntry:
        """End the current attempt: store the outcome and the stop intent together, then stop the job.
        Capacity moves to a draining record unless the attempt ended cleanly (`release_now`)."""
        e, now = t.entry, self.clock()
        job_id, registering = e.nomad_job_id, t.registering
        fields: dict[str, Any] = {"at": now, "reason": reason}
        if to is EntryState.QUEUED:
            fields.update(attempts=e.attempts + 1, placements=(), registered_at=None,
                          refusals=e.refusals + (1 if refused else 0))
        else:
            fields["finished_at"] = now
        stop = StopIntent(job_id, e.namespace, reason or to.value, now, 0, now) if stop_job else None
        # an end that an allocation event told us is re-derived from Nomad's listing after a power loss:
        # it need not wait for the disk (and the service lock is held meanwhile)
        moved = self.store.transition(e.id, to, expect=LIVE, stop=stop, durable=durable, **fields)
        held = self.ledger.release(EntryId(e.id))
        if held is not None and not release_now and stop_job:
            d = Draining(job_id, e.namespace, e.id, dict(t.allocs), register_in_flight=registering)
            self.draining[job_id] = d
            self.reserve(d.key, held.team, held.placements)
            self.maybe_release(d)
        if to is EntryState.QUEUED and t.spec is not None:
            t.entry, t.allocs, t.registering = compact(moved, t.spec)[0], {}, False
            t.request = self._request(t)
            self.waiting[e.id] = t
        else:
            self.entries.pop(e.id, None)
        self.live.pop(e.id, None)
        if stop_job and not registering:  # else the register's reply starts the stop
            self.start_stop(job_id, e.namespace)
        self.wake()
        return moved
