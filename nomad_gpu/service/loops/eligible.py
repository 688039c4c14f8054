"""Which queued entries a cycle considers: not those still waiting for their `after:` dependencies (an
entry whose dependency ended badly ends here), nor sweep trials beyond their sweep's `max_parallel`.

Each held-back entry is told why in its reason. The sweeps' limits are kept in the store's meta
(`sweep_limits`), so a restart throttles as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace

from nomad_gpu.service.admission.dependencies import DependencyGate
from nomad_gpu.service.life.lifecycle import Lifecycle
from nomad_gpu.service.life.tracking import Tracked
from nomad_gpu.service.loops.throttle import throttle
from nomad_gpu.store.contract import Store

META_KEY = "sweep_limits"


class SweepLimits:
    """Each sweep's `max_parallel`, by sweep ID, as stored in the store's meta."""

    def __init__(self, store: Store) -> None:
        self.store = store
        raw = store.get_meta(META_KEY)
        self.by_sweep: dict[str, int] = {k: int(v) for k, v in json.loads(raw).items()} if raw else {}

    def set(self, sweep_id: str, limit: int) -> None:
        self.by_sweep[sweep_id] = limit
        self._save()

    def forget_gone(self) -> None:
        """Forget the limits of sweeps that have no entry left (retention, or a team's bounded history)."""
        if not self.by_sweep:
            return
        alive = {s for s in self.by_sweep if self.store.list(sweep=s, limit=1)}
        if alive != set(self.by_sweep):
            self.by_sweep = {k: v for k, v in self.by_sweep.items() if k in alive}
            self._save()

    def _save(self) -> None:
        self.store.set_meta(META_KEY, json.dumps(self.by_sweep))


def eligible(queued: list[Tracked], live: Iterable[Tracked], *, deps: DependencyGate, limits: SweepLimits,
             life: Lifecycle, store: Store) -> list[Tracked]:
    """``queued`` less what waits for `after:` and what its sweep's parallelism holds back (``live``: the
    entries holding capacity, each counted against its sweep's limit)."""
    ready = waiting_for_dependencies(queued, deps=deps, life=life, store=store)
    if not limits.by_sweep:
        return ready
    keep, held = throttle([t.entry for t in ready], (t.entry for t in live), limits.by_sweep)
    _tell(store, ready, held)
    return [ready[i] for i in keep]


def waiting_for_dependencies(queued: list[Tracked], *, deps: DependencyGate, life: Lifecycle,
                             store: Store) -> list[Tracked]:
    """Hold back entries whose dependencies have not all completed; say so in their reason."""
    deps.reset()
    out: list[Tracked] = []
    held: dict[str, str] = {}
    for t in queued:
        if t.spec is None or not t.spec.after:
            out.append(t)
            continue
        verdict = deps.verdict(t.spec.after)
        if verdict.ready:
            out.append(t)
        elif verdict.failed:
            life.dependency_failed(t.entry.id, verdict.reason)
        else:
            held[t.entry.id] = verdict.reason
    _tell(store, queued, held)
    return out


def _tell(store: Store, tracked: list[Tracked], held: dict[str, str]) -> None:
    """Write each held entry's reason where it changed (in memory and, in one call, in the store)."""
    reasons: dict[str, str] = {}
    for t in tracked:
        if (text := held.get(t.entry.id)) is not None and t.entry.reason != text:
            reasons[t.entry.id] = text
            t.entry = replace(t.entry, reason=text)
    if reasons:
        store.set_reasons(reasons)
