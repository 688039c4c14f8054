"""The scheduler service: the queue, the ledger and Nomad's truth, kept in step.

Three kinds of threads meet here, all under one lock: the watcher (Nomad's events and resyncs),
the cycle loop (decides), and the actuator pool (registers jobs over HTTP, outside the lock). A
terminal allocation releases its GPUs and wakes the cycle at once; the periodic tick is only a
safety net. Nomad is the source of truth for what runs (DESIGN 3.5): foreign allocations hold
capacity too, and a resync reconciles everything the stream may have missed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from nomad_gpu.domain.cycle import Admit, CycleConfig, Decision, Wait, run_cycle
from nomad_gpu.domain.errors import InvalidRequest, LedgerConflict, NomadGpuError, UnknownEntry
from nomad_gpu.domain.fairshare import UsageHistory
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.requests import JobRequest
from nomad_gpu.nomad.client import NomadError
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus
from nomad_gpu.render import JobSpec, RenderError, SpecError, SweepSpec, parse_spec
from nomad_gpu.render.sweep import expand_sweep
from nomad_gpu.service.actuator import Actuator
from nomad_gpu.service.metrics import Metrics
from nomad_gpu.service.settings import SchedulingSettings
from nomad_gpu.service.translate import (
    check_supported,
    job_request,
    placement_from_json,
    placement_json,
    render_placement,
)
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.sqlite import SqliteStore

logger = logging.getLogger(__name__)

JOB_PREFIX = "ngpu-"
FOREIGN = Team("_nomad")


def entry_of_job(job_id: str) -> str | None:
    """`ngpu-q000012` or `ngpu-q000012-3` -> `q000012`; None for jobs that are not ours."""
    if not job_id.startswith(JOB_PREFIX):
        return None
    return job_id[len(JOB_PREFIX):].split("-", 1)[0] or None


@dataclass
class _Queued:
    entry: QueueEntry
    spec: JobSpec
    request: JobRequest


@dataclass
class _Running:
    entry: QueueEntry
    spec: JobSpec
    allocs: dict[str, AllocInfo] = field(default_factory=dict)


@dataclass
class _Stopping:
    """A cancelled entry whose allocations Nomad has not yet confirmed ended (DESIGN 3.5)."""

    live: _Running
    stopped: bool = False


class SchedulerService:
    def __init__(self, store: SqliteStore, actuator: Actuator, settings: SchedulingSettings,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.actuator = actuator
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.ledger = Ledger()
        self.usage = UsageHistory()
        self.holds: dict[EntryId, frozenset[NodeId]] = {}
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._queued: dict[str, _Queued] = {}
        self._live: dict[str, _Running] = {}
        self._stopping: dict[str, _Stopping] = {}
        self._alloc_index: dict[str, int] = {}
        self._foreign: dict[str, AllocInfo] = {}
        self._sweep_limits: dict[str, int] = {}
        self._pool = ThreadPoolExecutor(max_workers=settings.actuator_workers, thread_name_prefix="actuator")
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        """Set after the first reconcile: nothing is admitted before Nomad's state is known."""
        self.cycles = 0
        self._load()

    # ---- start-up ----------------------------------------------------------------------------
    def _load(self) -> None:
        for e in self.store.list([EntryState.QUEUED, EntryState.ADMITTED, EntryState.RUNNING]):
            spec = _spec_of(e)
            if e.state is EntryState.QUEUED:
                self._queued[e.id] = _Queued(e, spec, job_request(e, spec))
            else:
                self._live[e.id] = _Running(e, spec)
        raw = self.store.get_meta("sweep_limits")
        if raw:
            self._sweep_limits = {k: int(v) for k, v in json.loads(raw).items()}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="cycle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=False)

    def wake(self) -> None:
        self._wake.set()

    # ---- submissions -------------------------------------------------------------------------
    def submit(self, data: Any, *, idempotency_key: str | None = None) -> list[QueueEntry]:
        """Validate and store a job or a sweep (all trials or none). SpecError/InvalidRequest on bad input."""
        spec = parse_spec(data)
        now = self.clock()
        if isinstance(spec, SweepSpec):
            trials = expand_sweep(spec)
            sweep_id = f"{spec.name}-{int(now * 1000):x}"
            specs: list[tuple[JobSpec, str | None]] = [(t, sweep_id) for t in trials]
        else:
            specs, sweep_id = [(spec, None)], None
        for s, _ in specs:
            check_supported(s)
        entries = [QueueEntry(id="", name=s.name, team=s.team, priority=s.priority, spec=s.model_dump(mode="json"),
                              submitted_at=now, max_retries=s.retries, sweep=sw,
                              idempotency_key=f"{idempotency_key}/{i}" if idempotency_key else None)
                   for i, (s, sw) in enumerate(specs)]
        with self._lock:
            if isinstance(spec, SweepSpec) and sweep_id and spec.sweep.max_parallel:
                self._sweep_limits[sweep_id] = spec.sweep.max_parallel
                self.store.set_meta("sweep_limits", json.dumps(self._sweep_limits))
            stored = self.store.add(entries)
            for e in stored:
                if e.state is EntryState.QUEUED and e.id not in self._queued:
                    s = _spec_of(e)
                    self._queued[e.id] = _Queued(e, s, job_request(e, s))
            self.metrics.submitted.inc(len(stored))
        self.wake()
        return stored

    def cancel(self, entry_id: str) -> QueueEntry:
        """Cancel an entry. A live one keeps its capacity until Nomad confirms its allocations ended."""
        with self._lock:
            entry = self.store.get(entry_id)
            if entry.state.is_terminal():
                return entry
            now = self.clock()
            moved = self.store.transition(entry_id, EntryState.CANCELLED, finished_at=now, at=now,
                                          reason="cancelled by user")
            self._queued.pop(entry_id, None)
            self.holds.pop(EntryId(entry_id), None)
            live = self._live.pop(entry_id, None)
            if live is None:
                self.ledger.release(EntryId(entry_id))
            else:
                self._stopping[entry_id] = _Stopping(live)
        if live is not None:
            self._pool.submit(self._stop_cancelled, entry_id, entry.nomad_job_id)
        self.wake()
        return moved

    def _stop_cancelled(self, entry_id: str, job_id: str) -> None:
        try:
            self.actuator.stop(job_id, purge=True)
        except NomadError as exc:
            logger.warning("stop %s failed: %s; its GPUs stay held until Nomad reports it ended", job_id, exc)
            return
        with self._lock:
            stopping = self._stopping.get(entry_id)
            if stopping is not None:
                stopping.stopped = True
                self._maybe_drained(entry_id)

    def _maybe_drained(self, entry_id: str) -> None:
        """Release a cancelled entry once it is stopped and every allocation Nomad made is terminal."""
        stopping = self._stopping[entry_id]
        if stopping.stopped and all(a.is_terminal for a in stopping.live.allocs.values()):
            del self._stopping[entry_id]
            if self.ledger.release(EntryId(entry_id)) is not None:
                self.wake()

    # ---- the cycle ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self.settings.tick_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            if not self.ready.is_set():
                continue
            try:
                self.run_cycle()
            except Exception:
                logger.exception("scheduling cycle failed")

    def run_cycle(self) -> list[Decision]:
        """Decide under the lock, then hand admissions to the actuator pool."""
        started = time.perf_counter()
        with self._lock:
            now = self.clock()
            self.usage = self.usage.advance(now, self.ledger.team_usage(), self.settings.fair.half_life_s)
            queue = self._eligible()
            config = CycleConfig(policy=self.settings.policy, hol_threshold_s=self.settings.hol_threshold_s,
                                 fair=self.settings.fair)
            result = run_cycle(self.ledger, [q.request for q in queue], now=now, config=config,
                               usage=self.usage, holds=self.holds)
            self.holds = dict(result.holds)
            admitted: list[tuple[QueueEntry, JobSpec, tuple[AllocPlacement, ...]]] = []
            reasons: dict[str, str] = {}
            for d in result.decisions:
                if isinstance(d, Admit):
                    q = self._queued.pop(d.entry)
                    entry = self.store.transition(
                        d.entry, EntryState.ADMITTED, admitted_at=now, at=now, reason="",
                        placements=tuple(placement_json(p) for p in d.placements))
                    self._live[d.entry] = _Running(entry, q.spec)
                    admitted.append((entry, q.spec, d.placements))
                    self.metrics.admitted.inc()
                elif isinstance(d, Wait):
                    text = str(d)
                    q = self._queued[d.entry]
                    if q.entry.reason != text:
                        reasons[d.entry] = text
                        q.entry = replace(q.entry, reason=text)
            if reasons:
                self.store.set_reasons(reasons)
            self.cycles += 1
            self.metrics.observe_cycle(time.perf_counter() - started, len(result.decisions))
            self.metrics.set_queue(len(self._queued), len(self._live),
                                   {str(t): v for t, v in self.ledger.team_usage().items()})
        for entry, spec, placements in admitted:
            self._pool.submit(self._register, entry, spec, placements)
        return list(result.decisions)

    def _eligible(self) -> list[_Queued]:
        """Queued entries, less sweep trials beyond their sweep's parallelism."""
        if not self._sweep_limits:
            return list(self._queued.values())
        active: dict[str, int] = {}
        for r in self._live.values():
            if r.entry.sweep:
                active[r.entry.sweep] = active.get(r.entry.sweep, 0) + 1
        out: list[_Queued] = []
        for q in sorted(self._queued.values(), key=lambda q: q.entry.id):
            sweep = q.entry.sweep
            limit = self._sweep_limits.get(sweep or "")
            if sweep and limit is not None:
                if active.get(sweep, 0) >= limit:
                    continue
                active[sweep] = active.get(sweep, 0) + 1
            out.append(q)
        return out

    def _register(self, entry: QueueEntry, spec: JobSpec, placements: tuple[AllocPlacement, ...]) -> None:
        try:
            self.actuator.submit(entry, spec, render_placement(spec, placements))
            self.metrics.registered.inc()
            with self._lock:
                cancelled_meanwhile = entry.id in self._stopping
            if cancelled_meanwhile:  # the cancel's stop may have reached Nomad before this register
                self._stop_cancelled(entry.id, entry.nomad_job_id)
        except NomadError as exc:
            logger.warning("register %s failed: %s", entry.nomad_job_id, exc)
            with self._lock:
                self._undo_admission(entry.id, str(exc), permanent=not exc.retryable)
        except (RenderError, InvalidRequest) as exc:
            logger.error("cannot render %s: %s", entry.id, exc)
            with self._lock:
                self._undo_admission(entry.id, f"cannot render: {exc}", permanent=True)

    def _undo_admission(self, entry_id: str, reason: str, *, permanent: bool) -> None:
        if entry_id in self._stopping and not self._stopping[entry_id].live.allocs:
            del self._stopping[entry_id]  # cancelled, and the register never happened
            self.ledger.release(EntryId(entry_id))
            return
        live = self._live.get(entry_id)
        if live is None or live.allocs:
            return  # already placed or gone: Nomad's events decide from here
        self._live.pop(entry_id)
        self.ledger.release(EntryId(entry_id))
        now = self.clock()
        if permanent:
            self.store.transition(entry_id, EntryState.FAILED, finished_at=now, at=now, reason=reason)
        else:
            e = self.store.transition(entry_id, EntryState.QUEUED, placements=(), at=now, reason=reason)
            self._queued[entry_id] = _Queued(e, live.spec, job_request(e, live.spec))
        self.wake()

    def _stop_job(self, job_id: str, purge: bool = False) -> None:
        try:
            self.actuator.stop(job_id, purge=purge)
        except NomadError as exc:
            logger.warning("stop %s failed: %s", job_id, exc)

    # ---- Nomad's side (WatchHandler) ---------------------------------------------------------
    def on_resync(self, nodes: list[Node], allocs: list[AllocInfo]) -> None:
        with self._lock:
            present = {n.id for n in nodes}
            for node_id in [n.id for n in self.ledger.inventory if n.id not in present]:
                self.ledger.remove_node(node_id)
            for node in nodes:
                self.ledger.set_node(node)
            # placements we decided before a restart: reserve them again first
            for entry_id, live in sorted(self._live.items()):
                if EntryId(entry_id) not in self.ledger and live.entry.placements:
                    self._reserve(EntryId(entry_id), Team(live.entry.team),
                                  [placement_from_json(p) for p in live.entry.placements])
            for a in allocs:
                self._alloc(a, force=True)
            # a job we admitted whose allocations are all gone from Nomad's view
            seen_jobs = {a.job_id for a in allocs}
            for entry_id, stopping in list(self._stopping.items()):
                if stopping.live.entry.nomad_job_id not in seen_jobs and stopping.stopped:
                    stopping.live.allocs.clear()
                    self._maybe_drained(entry_id)
            for entry_id, live in list(self._live.items()):
                if live.allocs and live.entry.nomad_job_id not in seen_jobs:
                    self._finish(entry_id, lost=True)
            restarts = [(live.entry, live.spec) for live in self._live.values() if not live.allocs]
        first = not self.ready.is_set()
        self.ready.set()
        if first:
            for entry, spec in restarts:  # idempotent: same job ID, same pins
                placements = tuple(placement_from_json(p) for p in entry.placements)
                if placements:
                    self._pool.submit(self._register, entry, spec, placements)
        self.metrics.resyncs.inc()
        self.wake()

    def on_node(self, node: Node) -> None:
        with self._lock:
            self.ledger.set_node(node)
        self.wake()

    def on_node_removed(self, node_id: str) -> None:
        with self._lock:
            self.ledger.remove_node(NodeId(node_id))
        self.wake()

    def on_alloc(self, alloc: AllocInfo) -> None:
        with self._lock:
            freed = self._alloc(alloc, force=False)
        if freed:
            self.wake()

    def on_job_deregistered(self, job_id: str) -> None:
        entry_id = entry_of_job(job_id)
        with self._lock:
            live = self._live.get(entry_id or "")
            if live is not None and not live.allocs and live.entry.nomad_job_id == job_id:
                self._finish(live.entry.id, lost=True)
        self.wake()

    # ---- internals (lock held) ---------------------------------------------------------------
    def _alloc(self, a: AllocInfo, *, force: bool) -> bool:
        """Apply one allocation update; True when capacity was freed."""
        last = self._alloc_index.get(a.id)
        if last is not None and a.modify_index and a.modify_index < last and not force:
            return False  # a stale replay (the stream's index is inclusive and may rewind)
        self._alloc_index[a.id] = max(a.modify_index, last or 0)
        entry_id = entry_of_job(a.job_id)
        stopping = self._stopping.get(entry_id) if entry_id else None
        if stopping is not None and stopping.live.entry.nomad_job_id == a.job_id:
            stopping.live.allocs[a.id] = a
            self._maybe_drained(stopping.live.entry.id)
            return False
        live = self._live.get(entry_id) if entry_id else None
        if live is None or live.entry.nomad_job_id != a.job_id:
            # not ours, or an earlier attempt / a finished entry of ours: whatever Nomad runs holds capacity
            return self._foreign_alloc(a)
        live.allocs[a.id] = a
        if not a.is_terminal and live.entry.state is EntryState.ADMITTED:
            now = self.clock()
            live.entry = self.store.transition(live.entry.id, EntryState.RUNNING, at=now)
            if EntryId(live.entry.id) in self.ledger:
                self.ledger.confirm(EntryId(live.entry.id))
        terminal = [x for x in live.allocs.values() if x.is_terminal]
        if a.is_terminal and len(terminal) >= max(len(live.entry.placements), 1):
            self._finish(live.entry.id)
            return True
        if a.is_terminal and a.client_status is not AllocStatus.COMPLETE:
            self._pool.submit(self._stop_job, a.job_id)  # a failed member fails the gang
        return False

    def _foreign_alloc(self, a: AllocInfo) -> bool:
        """Allocations of plain Nomad jobs hold GPUs too (Nomad is the source of truth)."""
        key = EntryId(f"nomad:{a.id}")
        if a.is_terminal:
            self._foreign.pop(a.id, None)
            return self.ledger.release(key) is not None
        if key in self.ledger or not a.device_ids or self.ledger.node_free(a.node_id) is None:
            return False
        p = AllocPlacement(group=a.task_group, index=0, node=a.node_id, cpu_mhz=a.cpu_mhz, memory_mb=a.memory_mb,
                           instance_ids=tuple(InstanceId(i) for i in a.device_ids), device_name=a.device_name,
                           gpu_equivalents=float(len(a.device_ids)))
        self._foreign[a.id] = a
        self._reserve(key, FOREIGN, [p])
        return False

    def _reserve(self, entry: EntryId, team: Team, placements: Iterable[AllocPlacement]) -> None:
        try:
            self.ledger.reserve(entry, team, placements)
        except LedgerConflict as exc:
            logger.error("reconcile: %s cannot be booked as Nomad reports it: %s", entry, exc)

    def _finish(self, entry_id: str, *, lost: bool = False) -> None:
        live = self._live.pop(entry_id)
        self.ledger.release(EntryId(entry_id))
        now = self.clock()
        statuses = {a.client_status for a in live.allocs.values()}
        ok = not lost and statuses == {AllocStatus.COMPLETE}
        why = "lost" if lost else ", ".join(sorted(s.value for s in statuses))
        if not ok:
            # stop what is left of this attempt, so Nomad never replaces a lost allocation on our pins
            self._pool.submit(self._stop_job, live.entry.nomad_job_id)
        if ok:
            self.store.transition(entry_id, EntryState.COMPLETE, finished_at=now, at=now, reason="")
            self.metrics.finished.labels("complete").inc()
        elif live.entry.attempts < live.entry.max_retries:
            e = self.store.transition(entry_id, EntryState.QUEUED, attempts=live.entry.attempts + 1, placements=(),
                                      at=now, reason=f"retrying after {why}")
            self._queued[entry_id] = _Queued(e, live.spec, job_request(e, live.spec))
            self.metrics.finished.labels("retried").inc()
        else:
            self.store.transition(entry_id, EntryState.FAILED, finished_at=now, at=now, reason=f"allocation {why}")
            self.metrics.finished.labels("failed").inc()

    # ---- reads for the API -------------------------------------------------------------------
    def inventory(self) -> list[dict[str, Any]]:
        with self._lock:
            out = []
            for node in self.ledger.inventory:
                nf = self.ledger.node_free(node.id)
                out.append(_node_view(node, nf))
            return out

    def status(self) -> dict[str, Any]:
        with self._lock:
            gpus = sum(len(n.gpus) for n in self.ledger.inventory)
            return {
                "ready": self.ready.is_set(), "cycles": self.cycles, "queued": len(self._queued),
                "live": len(self._live), "nodes": len(self.ledger.inventory), "gpus": gpus,
                "team_usage_gpu": dict(self.ledger.team_usage()),
                "holds": {e: sorted(n) for e, n in self.holds.items()},
            }


def _spec_of(entry: QueueEntry) -> JobSpec:
    spec = parse_spec(dict(entry.spec))
    if not isinstance(spec, JobSpec):
        raise SpecError(f"entry {entry.id} does not hold a job spec")
    return spec


def _node_view(node: Node, nf: Any) -> dict[str, Any]:
    free_gpus = nf.gpu_free if nf is not None else {}
    return {
        "id": node.id, "name": node.name, "datacenter": node.datacenter, "status": node.status.value,
        "schedulable": node.schedulable, "cpu_mhz": node.cpu_mhz, "memory_mb": node.memory_mb,
        "cpu_free": nf.cpu_free if nf is not None else 0, "memory_free": nf.mem_free if nf is not None else 0,
        "gpus": [{"id": g.id, "model": g.model, "mode": g.mode.value, "healthy": g.healthy,
                  "free_milli": free_gpus.get(g.id, 0)} for g in node.gpus],
        "migs": [{"id": m.id, "device": m.device_name, "healthy": m.healthy,
                  "free": nf is not None and m.id in nf.mig_free.get(m.device_name, [])} for m in node.migs],
    }


__all__ = ["NomadGpuError", "SchedulerService", "UnknownEntry", "entry_of_job"]
