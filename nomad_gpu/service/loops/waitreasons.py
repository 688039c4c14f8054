"""What each entry a cycle left waiting is told: its class's words for the wait, or why no node of the
fleet could ever take it, or the cycle's own reason; a static port's note first; and a MIG re-layout's
word where one is planned or under way for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from nomad_gpu.domain.cycle import Decision, Wait
from nomad_gpu.domain.ids import EntryId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.service.admission.fleetcheck import FleetShapes, NeverCache
from nomad_gpu.service.asks.classes import ClassBook
from nomad_gpu.service.life.lifecycle import Lifecycle
from nomad_gpu.service.relayout.loop import RELAYOUT_HELPS, RelayoutLoop


def wait_reasons(decisions: Sequence[Decision], *, life: Lifecycle, classes: ClassBook, ledger: Ledger,
                 shapes: FleetShapes, relayout: RelayoutLoop | None, now: float) -> dict[str, str]:
    """The reasons that changed, by entry ID; each tracked entry's reason is updated in memory too."""
    reasons: dict[str, str] = {}
    never = NeverCache(shapes(ledger.inventory))
    waits: dict[object, Any] = {}
    for d in decisions:
        if isinstance(d, Wait):
            t = life.entries.get(d.entry)
            text = (classes.wait_line(t.spec if t is not None else None, d.reason, ledger, waits)
                    or never.reason(d, t.request if t is not None else None) or str(d))
            if note := life.port_notes.get(d.entry):  # nodes left out for a static port first
                text = f"{note}; {text}"
            if t is not None and t.entry.reason != text:
                reasons[d.entry] = text
                t.entry = replace(t.entry, reason=text)
    if relayout is not None:
        waiting = [t.request for d in decisions if isinstance(d, Wait) and d.reason in RELAYOUT_HELPS
                   and (t := life.entries.get(d.entry)) is not None and t.request is not None]
        for entry, text in relayout.after_cycle(now, waiting, ledger.index.nodes()).items():
            tracked = life.entries.get(EntryId(entry))
            if tracked is not None and tracked.entry.reason != text:
                reasons[tracked.entry.id] = text
                tracked.entry = replace(tracked.entry, reason=text)
    return reasons
