"""Nomad's allocation updates, each applied to the attempt it belongs to.

An update is dropped when it is older than one already applied (the event stream's index is inclusive and
may rewind); one of a draining job goes to the drain; one of no live attempt of ours is booked as another's
(or, ours but unknown, stopped as an orphan); the rest become the life's `AllocUpdate` events, with what
Nomad's own words add (a pin placed short, max_run_duration, Nomad's preemption, a node cut off).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from nomad_gpu.domain.ids import EntryId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.cutoff import CutOffWatch, ended_reason, reason
from nomad_gpu.service.life.foreign import ForeignAllocs
from nomad_gpu.service.life.pins import pin_mismatch
from nomad_gpu.service.life.preempted import preempted_reason
from nomad_gpu.service.life.runner import Runner
from nomad_gpu.service.life.stops import Stops
from nomad_gpu.service.life.tracking import LIVE, Draining, Tracked
from nomad_gpu.store.entries import parse_job_id

_ALLOC_INDEX_MAX = 10_000
"""Allocations whose last index is remembered (to drop stale replays): only recent ones can be replayed."""


class AllocFeed:
    """Owned by the life cycle; runs under its lock."""

    def __init__(self, entries: dict[str, Tracked], draining: dict[str, Draining], runner: Runner, stops: Stops,
                 foreign_allocs: ForeignAllocs, ledger: Ledger, metrics: Metrics, instance: str,
                 cut_off: CutOffWatch) -> None:
        self.entries, self.draining, self.runner, self.stops = entries, draining, runner, stops
        self.cut_off = cut_off
        self.foreign_allocs, self.ledger, self.metrics, self.instance = foreign_allocs, ledger, metrics, instance
        self._index: OrderedDict[str, int] = OrderedDict()

    @property
    def foreign(self) -> dict[str, AllocInfo]:
        return self.foreign_allocs.foreign

    def on_alloc(self, a: AllocInfo, *, force: bool = False) -> bool:
        """Apply one allocation update; True when capacity was freed."""
        last = self._index.get(a.id)
        if last is not None and a.modify_index and a.modify_index < last and not force:
            return False  # a stale replay (the stream's index is inclusive and may rewind)
        self._index[a.id] = max(a.modify_index, last or 0)
        self._index.move_to_end(a.id)
        if len(self._index) > _ALLOC_INDEX_MAX:
            self._index.popitem(last=False)
        self.cut_off.note(a)
        d = self.draining.get(a.job_id)
        if d is not None:
            d.allocs[a.id] = a
            unbooked = d.key not in self.ledger  # drained again after a restart (lifecycle.py): booked by allocation
            freed = self.runner.drain_event(d, alloc_update(a))
            if unbooked:
                freed = self.foreign_allocs.book(a) or freed
            return freed
        ref = parse_job_id(a.job_id)
        t = self.entries.get(ref.entry) if ref is not None and ref.instance in ("", self.instance) else None
        if t is None or t.entry.nomad_job_id != a.job_id or t.entry.state not in LIVE:
            if ref is not None and ref.instance == self.instance and not a.is_terminal:
                self.stops.orphan(a)
            return self.foreign_allocs.book(a)
        known = t.allocs.get(a.id)
        if not a.resources_known and known is not None and known.ports:  # a stub keeps the ports Nomad gave
            a = replace(a, ports=known.ports)
        t.allocs[a.id] = a
        short = pin_mismatch(a, t.entry.placements)
        if short is not None:  # Nomad before 1.11.1 places a taken pin short (pins.py): never run it so
            self.metrics.pin_mismatches.inc()
        timeout = ""
        if a.max_run_exceeded:  # Nomad (2.0.3+) ended it at max_runtime itself: the timer's outcome, no retry
            limit = t.spec.max_runtime if t.spec is not None else None
            timeout = f"timeout: Nomad ended it at max_runtime{f' ({limit:g} s)' if limit else ''} (max_run_duration)"
        preempted = preempted_reason(a, self.foreign) if a.preempted_by and a.is_terminal else ""
        after, _ = self.runner.run(t.entry, t, t.attempt, alloc_update(a, timeout, short or "", preempted))
        if preempted:  # the preemptor's booking was refused while our attempt held its devices: book it now
            by = self.foreign.get(a.preempted_by)
            if by is not None and not by.is_terminal:
                self.foreign_allocs.book(by)
        return not after.phase.live and EntryId(after.entry) not in self.ledger


def alloc_update(a: AllocInfo, timeout: str = "", pin_short: str = "", preempted: str = "") -> ev.AllocUpdate:
    return ev.AllocUpdate(a.id, terminal=a.is_terminal, succeeded=a.succeeded,
                          complete=a.client_status is AllocStatus.COMPLETE,
                          outcome=a.outcome() if a.is_terminal else "", timeout=timeout, pin_short=pin_short,
                          exited_zero=a.stopped_zero,
                          preempted=preempted, cut_off=reason(a) if a.cut_off else "",
                          ended_cut_off=ended_reason(a) if a.ended_cut_off and not a.next_allocation else "",
                          replaced_by=a.next_allocation if a.ended_cut_off else "")

