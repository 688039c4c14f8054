"""The queue's expected starts and ends: the cycle run forward on a copy of the ledger.

The copy is made under the scheduler's lock and the forecast runs outside it, so a long queue's forecast
never holds up the cycle or the watcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nomad_gpu.domain.forecast import forecast_starts
from nomad_gpu.domain.ids import EntryId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.service.config.runtimes import eta_bases
from nomad_gpu.service.life.tracking import LIVE

if TYPE_CHECKING:
    from nomad_gpu.service.loops.scheduler import SchedulerService


def queue_etas(service: SchedulerService) -> dict[str, tuple[float | None, str]]:
    """Each queued entry's expected start and each live one's expected end (epoch seconds; None: unknown),
    with what it rests on: "runtime" (the specs' own estimates) or "estimate from ..." naming the
    operator's defaults (service/config/runtimes.py) behind the ends it waits for (domain/forecast.py)."""
    defaults = service.settings.runtime_defaults
    sources: dict[EntryId, str] = {}
    with service._lock:
        now = service.clock()
        queue = [t.request for t in service._eligible() if t.request is not None]
        ends: dict[EntryId, float | None] = {}
        runtimes: dict[EntryId, float | None] = {}
        for t in service.life.entries.values():
            runtime, sources[EntryId(t.entry.id)] = defaults.estimate(t.spec)
            if t.entry.state in LIVE:
                start = t.running_since or t.entry.admitted_at or now
                ends[EntryId(t.entry.id)] = start + runtime if runtime else None
            else:
                runtimes[EntryId(t.entry.id)] = runtime
        snapshot = Ledger(service.ledger.inventory)
        for r in service.ledger.reservations():
            snapshot.reserve(r.entry, r.team, r.placements, reported=True)
        config = service.settings.cycle_config()
        usage, holds = service.usage, dict(service.holds)
    starts = forecast_starts(snapshot, queue, ends=ends, runtimes=runtimes, now=now, config=config,
                             usage=usage, holds=holds)
    return {str(e): (t, basis) for e, (t, basis) in eta_bases(ends, starts, runtimes, sources).items()}
