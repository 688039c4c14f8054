"""The scheduler service: the cycle loop, submissions, and Nomad's events handed to the life cycle.

Three kinds of threads meet here, all under one lock: the watcher (Nomad's events and resyncs),
the cycle loop (decides, retries what is due), and the actuator pool (calls Nomad, outside the
lock). A terminal allocation releases its GPUs and wakes the cycle at once; the periodic tick is
only a safety net. How an entry moves through its life is decided in `lifecycle.py` alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nomad_gpu.domain.cycle import Admit, Decision, Wait, run_cycle
from nomad_gpu.domain.errors import NomadGpuError, UnknownEntry
from nomad_gpu.domain.fairshare import UsageHistory
from nomad_gpu.domain.ids import EntryId, NodeId
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.nomad.client import NomadError
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.nomad.evaldecode import EvalInfo
from nomad_gpu.render import JobSpec, SweepSpec, parse_spec
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.admission.dependencies import DependencyGate
from nomad_gpu.service.admission.fleetcheck import FleetShapes
from nomad_gpu.service.admission.submission import check_queued
from nomad_gpu.service.asks.classes import ClassBook
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.life.actuator import NomadActuator
from nomad_gpu.service.life.lifecycle import Lifecycle
from nomad_gpu.service.life.outage import Outage
from nomad_gpu.service.life.reconcile import Reconciler
from nomad_gpu.service.life.tracking import LIVE, Executor, Tracked
from nomad_gpu.service.loops.devicehealth import DeviceHealth
from nomad_gpu.service.loops.eligible import SweepLimits, eligible
from nomad_gpu.service.loops.etas import queue_etas
from nomad_gpu.service.loops.housekeeping import Housekeeping
from nomad_gpu.service.loops.preemption import Preemptions
from nomad_gpu.service.loops.statusread import StatusReader
from nomad_gpu.service.loops.waitreasons import wait_reasons
from nomad_gpu.service.relayout.loop import RelayoutLoop
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import Store, StoreFull, TeamQuota
from nomad_gpu.store.entries import entry_of_job

logger = logging.getLogger(__name__)

CANCEL_BATCH = 500
"""Queued trials of a sweep cancelled per commit and per hold of the lock: other requests get it between."""


class SchedulerService:
    def __init__(self, store: Store, actuator: NomadActuator, settings: SchedulingSettings,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 executor: Executor | None = None, steady: Callable[[], float] | None = None) -> None:
        """``steady``: the monotonic clock timers measure on (default: time.monotonic, or ``clock`` itself
        when a fake wall clock is given and no steady one)."""
        self.store = store
        self.actuator = actuator
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.steady = steady if steady is not None else (time.monotonic if clock is time.time else clock)
        self.ledger = Ledger()
        self.device_health = DeviceHealth()  # unhealthy devices and since when (devicehealth.py)
        self.usage = UsageHistory()
        self.holds: dict[EntryId, frozenset[NodeId]] = {}
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._wake_now = threading.Event()
        """A wake that skips the coalescing gap: capacity was freed, and a handoff must not wait."""
        self._stop = threading.Event()
        self._sweep_limits = SweepLimits(store)
        self._positions: dict[EntryId, int] = {}
        """Each waiting entry's place in the last cycle's order (1: decided first); replaced whole each cycle."""
        self._deps = DependencyGate(self.store)
        self._pool: ThreadPoolExecutor | None = None
        if executor is None:
            self._pool = ThreadPoolExecutor(max_workers=settings.actuator_workers, thread_name_prefix="actuator")
            executor = self._pool
        self.outage = Outage(self.steady, self.metrics)  # its probes back off on the steady clock
        self.classes = ClassBook(settings.classes, settings.take_back.preemption)
        self._shapes = FleetShapes()  # the fleet check reads these, not every node
        self.life = Lifecycle(store, self.ledger, actuator, lock=self._lock, executor=executor, clock=clock,
                              metrics=self.metrics, outage=self.outage, wake=self.wake_now,
                              refusal_avoid_s=settings.refusal_avoid_s,
                              admission_deadline_s=settings.admission_deadline_s, classes=self.classes,
                              unhold=self._unhold, stop_on_client_after_s=settings.stop_on_client_after_s)
        self.reconciler = Reconciler(self.life, self.ledger)
        self.preemption = Preemptions(settings, self.ledger, self.life, self.metrics, lambda: self.settings.fair)
        self.relayout: RelayoutLoop | None = None
        """MIG re-layouts (service/relayout/loop.py), set by the runtime when the operator enables them."""
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        self.stream_state: Callable[[], str] = lambda: "unknown"
        """The watcher's: connecting, following or forbidden (set by the runtime that wires them)."""
        """Set after the first reconcile: nothing is admitted before Nomad's state is known."""
        self.cycles = 0
        self._last_cycle = 0.0
        self.cycle_failures = 0
        self.last_cycle_error: str | None = None
        self._status = StatusReader(self)
        self._keeping = Housekeeping(store, lambda: self.settings, self._lock, self._sweep_limits, clock, self.steady)
        with self._lock:
            self.life.set_clocks(self.steady, clock(), self.steady(), self._keeping.wall_step_while_down())
            self.life.load()

    # ---- life ----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="cycle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake_now()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=False)

    def wake(self) -> None:
        self._wake.set()

    def _unhold(self, entry: EntryId) -> None:
        """The cycle's head-of-line hold for an entry that ended or is held: dropped (the life cycle says when)."""
        self.holds.pop(entry, None)

    def wake_now(self) -> None:
        """Wake the cycle without the coalescing gap (capacity was freed or an entry re-queued)."""
        self._wake_now.set()
        self._wake.set()

    # ---- submissions -------------------------------------------------------------------------
    def submit(self, data: Any, *, idempotency_key: str | None = None,
               spec: JobSpec | SweepSpec | None = None, quota: TeamQuota | None = None) -> list[QueueEntry]:
        """Validate and store a job or a sweep (all trials or none), after the checks of `submission.py` (its
        steps parse, class to supported, and limits in the store). `spec`: `data` already validated (the API's
        checks did it), so it is not validated again."""
        if spec is None:
            spec = parse_spec(data)
        checked = check_queued(spec, classes=self.classes, store=self.store, fleet=self._known_fleet,
                               new_sweep_id=self.store.new_sweep_id)
        spec, sweep_id = checked.spec, checked.sweep_id
        specs = [(s, sweep_id) for s in checked.jobs]
        now = self.clock()
        entries = [QueueEntry(id="", name=s.name, team=s.team, priority=s.priority, spec=s.model_dump(mode="json"),
                              submitted_at=now, max_retries=s.retries, sweep=sw, namespace=s.namespace,
                              idempotency_key=f"{idempotency_key}/{i}" if idempotency_key else None)
                   for i, (s, sw) in enumerate(specs)]
        with self._lock:
            if isinstance(spec, SweepSpec) and sweep_id and spec.sweep.max_parallel:
                self._sweep_limits.set(sweep_id, spec.sweep.max_parallel)
            # OverLimit: the team holds too much already; past what it may keep, its oldest finished entries
            # go, but none that a queued entry (or this submission) waits for
            stored = self.store.add(entries, quota, keep=lambda: self._waited_for(spec.after))
            validated = {id(e.spec): s for e, (s, _) in zip(entries, specs, strict=True)}
            for e in stored:
                if e.state is EntryState.QUEUED:
                    self.life.track(e, validated.get(id(e.spec)))  # a new entry keeps its spec object
            self.metrics.submitted.inc(len(stored))
        self.wake()
        return stored

    def _known_fleet(self) -> list[Node] | None:
        """The fleet a submission is checked against; None before the first reconcile (not known yet)."""
        if not self.ready.is_set():
            return None
        with self._lock:
            self.classes.observe(self.ledger.inventory)
            return self._shapes(self.ledger.inventory)  # its distinct shapes: the check's answers are the same

    def cancel(self, entry_id: str) -> QueueEntry:
        """Cancel an entry. A live one keeps its capacity until Nomad confirms its job stopped and ended."""
        with self._lock:
            moved = self.life.cancel(entry_id)
        self.wake()
        return moved

    def hold(self, entry_id: str) -> QueueEntry:
        """Keep a queued entry's place but admit nothing for it until `release`."""
        with self._lock:
            return self.life.hold(entry_id, True)

    def release(self, entry_id: str) -> QueueEntry:
        with self._lock:
            return self.life.hold(entry_id, False)

    def requeue(self, entry_id: str) -> QueueEntry:
        """Stop a live entry's job and queue it again (its GPUs drain first); no retry is used."""
        with self._lock:
            return self.life.requeue(entry_id)

    def update(self, entry_id: str, *, priority: int) -> QueueEntry:
        with self._lock:
            return self.life.set_priority(entry_id, priority)

    def cancel_sweep(self, sweep_id: str, team: str | None = None) -> list[QueueEntry]:
        """Drop a sweep's queued trials and stop its running ones; with ``team``, that team's trials only.
        UnknownEntry for an unknown sweep (or one with no trial of ``team``)."""
        trials = self.store.sweep_states(sweep_id, team)
        if not trials:
            raise UnknownEntry(f"no sweep {sweep_id!r}")
        queued = [entry_id for entry_id, state in trials if state is EntryState.QUEUED]
        moved: set[str] = set()
        for start in range(0, len(queued), CANCEL_BATCH):  # the lock is let go between batches
            with self._lock:  # each through the life cycle, the batch in one commit
                moved |= self.life.cancel_queued(queued[start:start + CANCEL_BATCH])
        with self._lock:  # the live ones (a sweep's parallelism of them), and any that moved on meanwhile
            for entry_id, state in trials:
                if entry_id not in moved and not state.is_terminal():
                    self.life.cancel(entry_id)
        self.wake()
        return self.store.list(sweep=sweep_id, team=team)

    # ---- the cycle ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self.settings.tick_s)
            gap = self._last_cycle + self.settings.min_cycle_interval_s - time.monotonic()
            if gap > 0 and not self._wake_now.is_set():
                self._wake_now.wait(gap)  # coalesce: what arrives meanwhile joins this cycle
            self._wake_now.clear()
            self._wake.clear()
            self._last_cycle = time.monotonic()
            if self._stop.is_set():
                break
            if not self.ready.is_set():
                continue
            self._cycle_once()

    def _cycle_once(self) -> None:
        """One cycle and its housekeeping; a failure is counted and shown in the status, not only logged."""
        try:
            self.run_cycle()
            self.housekeeping()
        except StoreFull as exc:  # said by the store once while it lasts; each cycle retries, no traceback
            self.cycle_failures += 1
            self.last_cycle_error = f"{type(exc).__name__}: {exc}"[:300]
        except Exception as exc:
            self.cycle_failures += 1
            self.last_cycle_error = f"{type(exc).__name__}: {exc}"[:300]
            logger.exception("scheduling cycle failed")

    def run_cycle(self) -> list[Decision]:
        """Retry what is due, decide under the lock and commit; registers go to the actuator pool.
        While Nomad does not answer nothing new is admitted (the queue keeps its order)."""
        started = time.perf_counter()
        with self._lock:
            now = self.clock()
            self.life.tick(now)
            if self.outage.down:
                if self.outage.probe_due(self.steady()):
                    self.life.executor.submit(self._probe)
                return []
            self.usage = self.usage.advance(now, self.ledger.team_usage(), self.settings.fair.half_life_s)
            self.classes.observe(self.ledger.inventory)  # a class's tiers are built over the fleet's facts
            queue = self._eligible()
            config = self.settings.cycle_config()
            if self.relayout is not None:
                self.relayout.before_cycle(self.ledger)  # instances being re-laid are offered to no one
            self.preemption.before_cycle(self.holds)  # after a restart: the holds of preemptions under way
            result = run_cycle(self.ledger, [t.request for t in queue if t.request is not None], now=now,
                               config=config, usage=self.usage, holds=self.holds)
            self.holds = dict(result.holds)
            # the cycle's own order (starving heads, then priority, fair share, age), less what it admitted
            in_order = (d for d in result.decisions if isinstance(d, Wait))
            self._positions = {d.entry: i for i, d in enumerate(in_order, 1)}
            self.life.admit([d for d in result.decisions if isinstance(d, Admit)], now)
            reasons = wait_reasons(result.decisions, life=self.life, classes=self.classes, ledger=self.ledger,
                                   shapes=self._shapes, relayout=self.relayout, now=now)
            self.preemption.after_cycle(result, self.holds, now, reasons)  # takes GPUs back for waits that may
            if reasons:
                self.store.set_reasons(reasons)
            self.cycles += 1
            self.metrics.observe_cycle(time.perf_counter() - started, len(result.decisions))
            live = len(self.life.live)
            self.metrics.set_queue(len(self.life.entries) - live, live, self.ledger.team_usage(), self.settings.fair)
        return list(result.decisions)

    def _probe(self) -> None:
        """Executor: does Nomad answer again? (Outage.probe_due says why this is needed.)"""
        try:
            self.actuator.ping()
        except NomadError as exc:
            self.outage.probed(str(exc))
            return
        self.outage.probed(None)
        self.wake()

    def housekeeping(self) -> None:
        """Retention, the heartbeat and the write-ahead log's checkpoint (housekeeping.py)."""
        self._keeping.run()

    def purge_finished(self, every_s: float = 600.0) -> int:
        return self._keeping.purge_finished(every_s)

    def _eligible(self) -> list[Tracked]:
        """Queued entries, less those waiting for `after:` and sweep trials beyond their parallelism."""
        return eligible(self.life.queued(self.clock()), self.life.live.values(), deps=self._deps,
                        limits=self._sweep_limits, life=self.life, store=self.store)

    # ---- Nomad's side (WatchHandler) ---------------------------------------------------------
    def on_resync(self, nodes: list[Node], allocs: list[AllocInfo]) -> None:
        first = not self.ready.is_set()
        with self._lock:
            self.outage.reachable()
            self.reconciler.resync(nodes, allocs, first=first)
            self.device_health.resync(nodes, self.clock())
        self.ready.set()
        self.metrics.resyncs.inc()
        self.wake()

    def on_node(self, node: Node) -> None:
        with self._lock:
            self.ledger.set_node(node)
            self.device_health.observe(node, self.clock())
        self.wake()

    def on_node_removed(self, node_id: str) -> None:
        with self._lock:
            self.ledger.remove_node(NodeId(node_id))
            self.device_health.forget(node_id)
        self.wake()

    def on_alloc(self, alloc: AllocInfo) -> None:
        with self._lock:
            freed = self.life.on_alloc(alloc)
        if freed:
            self.wake_now()

    def on_job_deregistered(self, job_id: str) -> None:
        """Someone stopped one of our live jobs before it was placed: settle it from Nomad's word."""
        entry_id = entry_of_job(job_id)
        with self._lock:
            t = self.life.entries.get(entry_id or "")
            if t is not None and t.entry.state in LIVE and t.entry.nomad_job_id == job_id and not t.allocs \
                    and not t.registering:
                self.life.on_job_gone(t)
        self.wake()

    def on_eval(self, evaluation: EvalInfo) -> None:
        with self._lock:
            self.life.on_eval(evaluation)
        self.wake()

    def etas(self) -> dict[str, tuple[float | None, str]]:
        """Each queued entry's expected start and each live one's expected end (etas.py)."""
        return queue_etas(self)

    # ---- reads for the API -------------------------------------------------------------------
    def position(self, entry: QueueEntry) -> int | None:
        """Where a queued entry stands in the order the cycle decides in (1: first), as the last cycle took
        the queue: its queue heads in the core's order (starving heads, then priority, fair share, age),
        less what it admitted. None for an entry the cycle did not consider: held, waiting for `after:`,
        beyond its sweep's `max_parallel`, or submitted since."""
        if entry.state is not EntryState.QUEUED or entry.held:
            return None
        return self._positions.get(EntryId(entry.id))

    def pending_reason(self) -> str:
        """The reason of a queued entry no cycle has decided on yet: why none has."""
        if not self.ready.is_set():
            return "not decided yet: the service has not read Nomad's state yet, and admits nothing before"
        if self.outage.down:
            return "not decided yet: Nomad does not answer, and nothing is admitted until it does"
        return "not decided yet: submitted since the last scheduling cycle"

    def _waited_for(self, also: Sequence[str]) -> set[str]:
        """Entry and sweep IDs that queued entries name in `after:` (and ``also``): never pruned. Asked by the
        store inside `submit`, which holds the lock (taking it here, under the store's, would invert the order)."""
        return {*also, *(dep for t in self.life.entries.values() if t.spec is not None for dep in t.spec.after)}

    def status(self) -> dict[str, Any]:
        return self.status_and_owners()[0]

    def status_and_owners(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The status, and the team of each entry in its ``holds``; never waits long for the lock (statusread.py)."""
        return self._status.read()


__all__ = ["NomadGpuError", "SchedulerService", "UnknownEntry", "entry_of_job"]
