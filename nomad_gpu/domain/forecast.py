"""When will each waiting job start? The same cycle, run forward in simulated time.

Like Slurm's `squeue --start`: running entries end at their runtime estimate, waiting ones are admitted in
queue order by the very cycle the service runs, on a copy of the ledger. An entry whose start depends on
capacity nobody can say when it frees (a running job without an estimate, a plain Nomad job) gets None:
unknown, never a made-up time. Fair-share usage is held at its current value over the forecast.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from nomad_gpu.domain.cycle import CycleConfig, run_cycle
from nomad_gpu.domain.fairshare import UsageHistory
from nomad_gpu.domain.ids import EntryId, NodeId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.requests import JobRequest

MAX_STEPS = 2_000
"""Forecast steps (one per distinct end time) at most: a bound on the work of one forecast."""


def forecast_starts(ledger: Ledger, queue: Sequence[JobRequest], *, ends: Mapping[EntryId, float | None],
                    runtimes: Mapping[EntryId, float | None], now: float, config: CycleConfig,
                    usage: UsageHistory, holds: Mapping[EntryId, frozenset[NodeId]] | None = None,
                    ) -> dict[EntryId, float | None]:
    """Expected start of each queued job (None: unknown). `ends` gives when each reservation in the ledger
    frees (None: unknown); `runtimes` each queued job's estimate (None: it never frees in the forecast)."""
    sim = Ledger(ledger.inventory)
    for r in ledger.reservations():
        sim.reserve(r.entry, r.team, r.placements, reported=True)  # as held, sick devices included
    events: list[tuple[float, str]] = [(max(end, now), str(e)) for e, end in ends.items()
                                       if end is not None and e in sim]
    heapq.heapify(events)
    waiting = {j.entry: j for j in queue}
    starts: dict[EntryId, float | None] = dict.fromkeys(waiting)
    t, held = now, dict(holds or {})
    for _ in range(MAX_STEPS):
        if not waiting:
            break
        result = run_cycle(sim, list(waiting.values()), now=t, config=config, usage=usage, holds=held)
        held = dict(result.holds)
        for admit in result.admitted:
            starts[admit.entry] = t
            del waiting[admit.entry]
            runtime = runtimes.get(admit.entry)
            if runtime is not None:
                heapq.heappush(events, (t + runtime, str(admit.entry)))
        if not events:
            break
        t = events[0][0]
        while events and events[0][0] <= t:
            sim.release(EntryId(heapq.heappop(events)[1]))
    return starts
