"""Reconciliation: Nomad's full picture (after every (re)connect and at start-up) against the queue.

The stream says what changed; a resync says what is. Placements decided before a restart are booked
again first, then every allocation Nomad lists is applied, then what the lists cannot say is asked of
Nomad directly: an acknowledged attempt whose job has vanished (it ran while nobody watched and was
garbage-collected) is settled from Nomad's word and never run again; an attempt whose register was never
acknowledged is registered again, create-only. Every move is made through the life cycle.
"""

from __future__ import annotations

import logging

from nomad_gpu.domain.ids import EntryId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.nomad.client import NomadError
from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.service.asks.translate import placement_from_json
from nomad_gpu.service.life.events import JobDead, JobGone
from nomad_gpu.service.life.lifecycle import Lifecycle
from nomad_gpu.service.life.tracking import LIVE, Tracked
from nomad_gpu.store import EntryState

logger = logging.getLogger(__name__)


class Reconciler:
    def __init__(self, life: Lifecycle, ledger: Ledger) -> None:
        self.life = life
        self.ledger = ledger

    def resync(self, nodes: list[Node], allocs: list[AllocInfo], *, first: bool) -> None:
        """Apply Nomad's whole picture (the caller holds the service lock)."""
        present = {n.id for n in nodes}
        for node_id in [n.id for n in self.ledger.inventory if n.id not in present]:
            self.ledger.remove_node(node_id)
        for node in nodes:
            self.ledger.set_node(node)
        # placements decided before a restart (or a node's return): book them again first
        for entry_id, t in sorted(self.life.entries.items()):
            if t.entry.state in LIVE and EntryId(entry_id) not in self.ledger and t.entry.placements:
                self.life.reserve(EntryId(entry_id), Team(t.entry.team),
                                  [placement_from_json(p) for p in t.entry.placements])
        for a in allocs:
            self.life.on_alloc(a, force=True)
        self.after_resync({a.job_id for a in allocs}, first)

    def after_resync(self, seen_jobs: set[str], first: bool) -> None:
        """What the stream could not say: attempts whose allocations are gone, registers to resume."""
        for d in list(self.life.draining.values()):
            if d.stopped and d.job_id not in seen_jobs:
                self.life.allocs_gone(d)
        for t in list(self.life.entries.values()):
            if t.entry.state not in LIVE or t.entry.nomad_job_id in seen_jobs:
                continue
            if t.entry.state is EntryState.ADMITTED and t.entry.registered_at is None:
                if first or t.retry_at:
                    self.life.start_register(t)  # create-only: finds its own job if the reply was lost
            else:
                self._start_settle(t)
        if first:
            for s in self.life.store.stops():
                self.life.start_stop(s.job_id, s.namespace)

    def _start_settle(self, t: Tracked) -> None:
        key = f"settle:{t.entry.id}"
        if key not in self.life.inflight:
            self.life.inflight.add(key)
            self.life.executor.submit(self._settle, t.entry.id, t.entry.attempts)

    def _settle(self, entry_id: str, attempt: int) -> None:
        """Executor: a live attempt with no allocation in Nomad's listing; ask Nomad about its job."""
        with self.life.lock:
            t = self.life.entries.get(entry_id)
            entry = t.entry if t is not None else None
        try:
            state = self.life.actuator.job_state(entry.nomad_job_id, entry.namespace) if entry is not None else None
        except NomadError as exc:
            with self.life.lock:
                self.life.inflight.discard(f"settle:{entry_id}")
                self.life.outage.unreachable(str(exc))
            return
        with self.life.lock:
            self.life.inflight.discard(f"settle:{entry_id}")
            t = self.life.entries.get(entry_id)
            if entry is None or t is None or t.entry.attempts != attempt or t.entry.state not in LIVE:
                return
            if state is None:
                # registered, then gone: it ran while unseen and was collected (or purged); never run it twice
                self.life.settle(t, JobGone())
                return
            for a in state.allocs:
                self.life.on_alloc(a, force=True)
            t2 = self.life.entries.get(entry_id)
            if t2 is t and not state.allocs and state.status == "dead":
                self.life.settle(t, JobDead())


