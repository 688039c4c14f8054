"""What can happen to an attempt (events) and what must then be done (effects): the vocabulary of
`machine.apply`. Plain frozen values, so a table or a property test can build them without a service.

Events carry the facts their source measured (Nomad's reply, an allocation's status, a timer's reason);
effects say what the runner (`service/life/lifecycle.py`) must do, in the order given.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nomad_gpu.store import EntryState


# ---- events -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Submit:
    """A stored submission is followed (its store write is the submission's own batch, with its quota)."""


@dataclass(frozen=True)
class Admit:
    """The cycle chose a concrete placement and reserved it in the ledger."""

    groups: int = 1
    """Its placements: one allocation each."""


@dataclass(frozen=True)
class RegisterOk:
    """Nomad acknowledged the attempt's register (or the create-only retry found its own job)."""

    attempt: int


@dataclass(frozen=True)
class RegisterLost:
    """The register's reply was lost or retryable (`forbidden`: Nomad's ACL said no, for now)."""

    attempt: int
    reason: str = ""
    forbidden: bool = False


@dataclass(frozen=True)
class RegisterRefused:
    """Nomad refused the job for good (or the register was never sent: its turn came too late)."""

    attempt: int
    reason: str = ""


@dataclass(frozen=True)
class RegisterDeferred:
    """Nomad is down: the register waits for it, pins kept, without counting a failure."""

    attempt: int


@dataclass(frozen=True)
class AllocUpdate:
    """One of the attempt's allocations as Nomad now reports it."""

    alloc: str
    terminal: bool = False
    succeeded: bool = False
    complete: bool = False
    """The client status is `complete` (a task that exited 0 in a service job ends `failed`)."""
    outcome: str = ""
    exited_zero: bool = False
    """Every task's last run ended with exit code 0, by itself or on the stop's signal (in its grace)."""
    timeout: str = ""
    """Nomad ended it at max_runtime itself (2.0.3+): the reason to store; empty otherwise."""
    pin_short: str = ""
    """Nomad placed it short of its pins (before 1.11.1): why; empty otherwise."""
    preempted: str = ""
    """Nomad evicted it for a higher-priority job (`PreemptedByAllocation`): the reason to store, naming the
    preempting allocation (service/life/preempted.py); empty otherwise."""
    cut_off: str = ""
    """Nomad's servers lost its node (`lost` or `unknown`) and its task may still run there: the reason to
    store (docs/partitions.md); empty otherwise."""
    ended_cut_off: str = ""
    """It ended because its node was cut off, its task gone (a kill by its own client, or the servers' lost
    verdict, read again after a restart): the reason to store; empty otherwise."""
    replaced_by: str = ""
    """It ended because its node was cut off, and Nomad placed a replacement in the same job
    (`NextAllocation`): the attempt goes on in that one; empty otherwise."""


@dataclass(frozen=True)
class AllocsGone:
    """A resync lists no allocation of the attempt's job any more (it was collected after its stop)."""


@dataclass(frozen=True)
class CutOffExpired:
    """A cut-off allocation's bound passed: its client has stopped it by now (`stop_on_client_after`, plus the
    capped kill_timeout and a margin, after the service saw it lost), so its capacity is free."""

    alloc: str


@dataclass(frozen=True)
class EvalRefused:
    """Nomad could not place the admitted job (a blocked or failed evaluation)."""

    reason: str
    avoid: bool = True
    """Leave the node out for a while (a failed evaluation is the scheduler giving up, not the node)."""


@dataclass(frozen=True)
class Cancel:
    """A user cancels the entry (alone or with its sweep)."""


@dataclass(frozen=True)
class DependencyFailed:
    reason: str


@dataclass(frozen=True)
class SpecInvalid:
    """A stored spec that a newer validator rejects."""

    reason: str


@dataclass(frozen=True)
class Hold:
    held: bool
    """True: hold a queued entry in its place; False: release it."""


@dataclass(frozen=True)
class Requeue:
    """A user stops the live attempt and queues the entry again (no retry used)."""


class Timer(enum.Enum):
    RETRY = "register retry"
    DEADLINE = "admission deadline"
    RUNTIME = "max_runtime"


@dataclass(frozen=True)
class TimerFired:
    """A timer's time came (the runner measured it on the steady clock); `reason` is what to store."""

    timer: Timer
    reason: str = ""


@dataclass(frozen=True)
class Resume:
    """A resync found an admitted attempt whose register was never acknowledged: send it again."""


@dataclass(frozen=True)
class StopConfirmed:
    """Nomad confirmed the attempt's job stopped; the allocations it listed then, as (id, terminal)."""

    allocs: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class JobGone:
    """An acknowledged attempt's job is gone from Nomad (collected while nobody watched)."""


@dataclass(frozen=True)
class JobDead:
    """The attempt's job is dead without an allocation."""


@dataclass(frozen=True)
class JobDeregistered:
    """Someone stopped the attempt's job outside the service before it was placed."""


@dataclass(frozen=True)
class Preempt:
    """A waiting job takes the running attempt's GPUs back (DESIGN 17, service/loops/preemption.py): the entry is
    `preempting`, holding its capacity while Nomad stops its job with its checkpoint grace; once every
    allocation is terminal it is queued again (its age kept, no retry used), or complete if it exited 0.
    `reason` names the preemptor and the node (`preempted by q000012 (serving) on node-1`): stored while it
    stops, it is what a restart reads back."""

    reason: str = "preempted"


@dataclass(frozen=True)
class Reclaim:
    """A job's GPUs are taken back (DESIGN 17): an idle job's (service/loops/reclaim.py), or, coming, a team's quota.
    The attempt drains (keeps its capacity) while Nomad stops it with its grace; then the entry is queued
    again with its age kept and no retry used (`requeue`), or it ends `reclaimed` (not failed, not
    cancelled)."""

    reason: str = "reclaimed"
    requeue: bool = True
    """True: queued again (work that checkpoints); False: it ends `reclaimed`."""


@dataclass(frozen=True)
class LeaseLost:
    """Coming (DESIGN 18): this replica lost the leader's lease. It stops acting at once: the attempt is
    forgotten here, nothing is written, and Nomad is not called; the next leader loads it from the store."""


Event = (Submit | Admit | RegisterOk | RegisterLost | RegisterRefused | RegisterDeferred | AllocUpdate | AllocsGone
         | EvalRefused | Cancel | DependencyFailed | SpecInvalid | Hold | Requeue | TimerFired | Resume
         | StopConfirmed | JobGone | JobDead | JobDeregistered | Preempt | Reclaim | LeaseLost | CutOffExpired)


# ---- effects ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Move:
    """A compare-and-set store write: the entry from one of `expect` to `to`. `requeue`: a new attempt
    (placements cleared); `refused`: it used no retry; `stop`: the intent to stop the attempt's Nomad job,
    in the same transaction; `durable=False`: an end a resync re-derives from Nomad."""

    to: EntryState
    expect: tuple[EntryState, ...]
    reason: str | None
    """None: the stored reason stays."""
    requeue: bool = False
    refused: bool = False
    stop: bool = False
    durable: bool = True
    held: bool | None = None


@dataclass(frozen=True)
class MarkRegistered:
    """Store the register's acknowledgement (never register this attempt again)."""


@dataclass(frozen=True)
class Register:
    """Send the attempt to Nomad (create-only), from the executor."""


@dataclass(frozen=True)
class RetryRegister:
    """Register again later: after `backoff` failures' backoff, or `soon` (a fixed short wait)."""

    failures: int
    soon: bool = False


@dataclass(frozen=True)
class Unreachable:
    """Nomad did not answer (or said forbidden): the service pauses admissions."""

    reason: str
    forbidden: bool = False


@dataclass(frozen=True)
class Started:
    """The attempt runs: note when, confirm its ledger booking, watch its wall-time limit."""


@dataclass(frozen=True)
class WatchDeadline:
    """An acknowledged attempt must be placed within the admission deadline."""


@dataclass(frozen=True)
class Stop:
    """Stop the attempt's Nomad job (its intent is stored already), from the executor."""


@dataclass(frozen=True)
class StopDone:
    """The stop intent is settled without a call (the register it would follow was never accepted)."""


@dataclass(frozen=True)
class Drain:
    """Keep the attempt's capacity (moved under its Nomad job) until Nomad stopped it and every allocation
    is terminal."""


@dataclass(frozen=True)
class Release:
    """Give the attempt's capacity back to the ledger now."""


@dataclass(frozen=True)
class ReleaseDrained:
    """A draining attempt is done: its job is stopped and every allocation terminal."""


@dataclass(frozen=True)
class Avoid:
    """Nomad refused the attempt: say so, and (`nodes`) leave its nodes out of the entry's candidates for a
    while."""

    nodes: bool = True


@dataclass(frozen=True)
class Requeued:
    """Follow the entry's next attempt, queued (a waiting entry, held lean)."""


@dataclass(frozen=True)
class Forget:
    """The entry is over (or no longer this replica's): stop following it."""


@dataclass(frozen=True)
class Unhold:
    """Drop the cycle's head-of-line hold for the entry."""


@dataclass(frozen=True)
class Count:
    """Count the attempt's end in the metrics under `label`."""

    label: str


@dataclass(frozen=True)
class Reject:
    """The request makes no sense in this state: say so (a 4xx)."""

    message: str


@dataclass(frozen=True)
class Wake:
    """Wake the cycle now: capacity or the queue changed."""


Effect = (Move | MarkRegistered | Register | RetryRegister | Unreachable | Started | WatchDeadline | Stop | StopDone
          | Drain | Release | ReleaseDrained | Avoid | Requeued | Forget | Unhold | Count | Reject | Wake)
