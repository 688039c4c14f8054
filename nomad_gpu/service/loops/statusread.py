"""The scheduler's status (`GET /v1/status`), read without waiting long for the scheduler's lock.

While a cycle or a large submission holds the lock, the counts are those last seen and what changes
without the lock is read fresh, so an operator's status answers while the service is busy (issue 31,
item 4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nomad_gpu.domain.cohorts import borrowed_by_team

if TYPE_CHECKING:
    from nomad_gpu.service.loops.scheduler import SchedulerService

STATUS_WAIT_S = 0.2
"""How long `status` waits for the scheduler's lock before it answers with the counts it last saw."""


class StatusReader:
    def __init__(self, service: SchedulerService) -> None:
        self.service = service
        self._seen: tuple[dict[str, Any], dict[str, str]] | None = None

    def read(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The status, and the team of each entry in its ``holds``; the first read waits for the lock."""
        s = self.service
        if not s._lock.acquire(timeout=STATUS_WAIT_S if self._seen is not None else -1):
            assert self._seen is not None
            seen, owners = self._seen
            return {**seen, **self.now()}, owners
        try:
            gpus = sum(len(n.gpus) for n in s.ledger.inventory)
            live = len(s.life.live)
            out = {
                "cycles": s.cycles, "queued": len(s.life.entries) - live,
                "live": live, "nodes": len(s.ledger.inventory), "gpus": gpus,
                "team_usage_gpu": dict(s.ledger.team_usage()),
                "team_borrowed_gpu": borrowed_by_team(s.ledger.team_usage(), s.settings.fair),
                "holds": {e: sorted(n) for e, n in s.holds.items()},
                "draining": len(s.life.draining), **s.preemption.status(),
                "instance": s.store.instance,
                "mig_relayouts": s.relayout.status() if s.relayout is not None else None,
                **self.now(),
            }
            owners = {e: t.entry.team for e in [*s.holds, *out["grace_warnings"]] if (t := s.life.entries.get(e))}
            self._seen = (out, owners)
            return out, owners
        finally:
            s._lock.release()

    def now(self) -> dict[str, Any]:
        """What the status reads without the lock."""
        s = self.service
        return {"ready": s.ready.is_set(), "cycles": s.cycles, "nomad_reachable": not s.outage.down,
                "event_stream": s.stream_state(), "cycle_failures": s.cycle_failures,
                "last_cycle_error": s.last_cycle_error}
