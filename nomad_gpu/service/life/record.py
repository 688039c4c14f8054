"""What the life cycle knows of one attempt of one entry (a `Record`, its `Phase`), and the record read back
from a stored entry. The data of the life machine (`service/life/machine.py`), apart from its transitions, so
the runner, the tracking and the table read it without the transition function.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from nomad_gpu.store import EntryState, QueueEntry


class Phase(enum.Enum):
    QUEUED = "queued"
    ADMITTED = "admitted"
    """Capacity reserved, the job sent (or being sent) to Nomad, not yet seen placed."""
    RUNNING = "running"
    PREEMPTING = "preempting"
    """Its GPUs are taken back: Nomad stops its job with its grace; it holds its capacity until every
    allocation is terminal, then is queued again (DESIGN 17)."""
    DRAINING = "draining"
    """Ended, and still holding its capacity while Nomad stops its job."""
    ENDED = "ended"
    """Ended; nothing held."""

    @property
    def live(self) -> bool:
        return self in (Phase.ADMITTED, Phase.RUNNING)


LIVE_STATES = (EntryState.ADMITTED, EntryState.RUNNING)


@dataclass(frozen=True)
class Record:
    """One attempt of one entry, as the life cycle keeps it."""

    entry: str
    attempt: int = 0
    phase: Phase = Phase.QUEUED
    outcome: EntryState | None = None
    """What the entry became when this attempt ended (queued again, or terminal); None while it lasts."""
    held: bool = False
    registering: bool = False
    """A register is in flight: its reply decides, and a stop waits for it."""
    registered: bool = False
    """Nomad acknowledged the register: it is never sent again."""
    booked: bool = False
    """The ledger holds the attempt's capacity (the runner refreshes it before each event)."""
    retries_left: int = 0
    failures: int = 0
    """Register failures in a row (their backoff)."""
    groups: int = 1
    """Allocations that must all end by themselves for the attempt to be complete."""
    open: frozenset[str] = field(default_factory=frozenset)
    done: frozenset[str] = field(default_factory=frozenset)
    clean: bool = True
    """Every allocation that ended did so `complete`."""
    exited: bool = True
    """Preempting: every allocation that ended had its tasks exit 0 (a checkpoint saved in its grace)."""
    stopped: bool = False
    """Draining: Nomad confirmed its job stopped."""
    fenced: bool = False
    """This replica lost the leader's lease: it acts on the attempt no more (the next leader loads it)."""

    @property
    def state(self) -> EntryState:
        """The entry's stored state while this attempt is its current one."""
        if self.outcome is not None:
            return self.outcome
        return {Phase.QUEUED: EntryState.QUEUED, Phase.ADMITTED: EntryState.ADMITTED,
                Phase.RUNNING: EntryState.RUNNING, Phase.PREEMPTING: EntryState.PREEMPTING}[self.phase]

    @property
    def holds_capacity(self) -> bool:
        return self.phase.live or self.phase in (Phase.DRAINING, Phase.PREEMPTING)


def record_of(e: QueueEntry) -> Record:
    """The record of a stored entry's current attempt (at start-up, or for an entry not followed)."""
    phase = {EntryState.QUEUED: Phase.QUEUED, EntryState.ADMITTED: Phase.ADMITTED,
             EntryState.RUNNING: Phase.RUNNING, EntryState.PREEMPTING: Phase.PREEMPTING}.get(e.state, Phase.ENDED)
    return Record(entry=e.id, attempt=e.attempts, phase=phase, outcome=e.state if phase is Phase.ENDED else None,
                  held=e.held, registered=e.registered_at is not None, retries_left=e.max_retries - e.retries_used,
                  groups=max(len(e.placements), 1))
