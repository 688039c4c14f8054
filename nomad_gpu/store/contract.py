"""The store contract: every method and attribute the service uses, and what each guarantees.

The service and the CLI are typed on `Store`, never on an implementation, and build it only through
`store/factory.py`. A second store (PostgreSQL, for several replicas) is written against this module and
must pass `tests/store/contract/`; the SQLite store (`store/sqlite.py`) is the reference.

A `typing.Protocol`, not an abstract base class: an implementation conforms by its shape and mypy --strict
proves it where the factory returns one as a `Store`, without inheriting or importing anything but the
values and errors below; what a type cannot say (atomicity, compare-and-set, ordering) the suite tests.

Guarantees that hold for every method:
- Thread-safe: the cycle, the watcher, the timers and the API's worker threads share one store.
- Every write is one transaction: wholly stored or not at all, whatever it raises.
- A write that cannot be stored for space raises `StoreFull` (an `Unavailable`: 503, retry later) with
  nothing of it stored; the first write that succeeds after one failed for space calls the listeners
  of `space`.
- A store on a database server raises `StoreUnavailable` (an `Unavailable` too) while the server cannot
  be reached, and carries on once it can.
- A write acknowledged with ``durable=True`` (the default) survives a power loss before the call returns.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nomad_gpu.domain.errors import NomadGpuError, Unavailable
from nomad_gpu.store.counts import SweepCount
from nomad_gpu.store.entries import EntryState, QueueEntry
from nomad_gpu.store.quota import TeamQuota
from nomad_gpu.store.sweeplist import SweepSummary
from nomad_gpu.store.usage import UsageTotals

__all__ = ["Admission", "SpaceSignal", "StaleTransition", "StopIntent", "Store", "StoreDamaged", "StoreFull",
           "StoreUnavailable", "TeamQuota"]


class StaleTransition(NomadGpuError):
    """The entry was not in a state the change may start from (someone else moved it first)."""


class StoreDamaged(NomadGpuError):
    """The database fails its integrity check (or is empty): the service refuses to start on it."""


class StoreFull(Unavailable):
    """The database's disk (or its size limit) is full: nothing of the write was stored; retry later."""


class StoreUnavailable(Unavailable):
    """A database server cannot be reached now (down, restarting, the connection lost): 503, retry later.
    The next call connects again. A write it interrupts was stored wholly or not at all; only one cut
    during its COMMIT leaves which unknown, as with any client of a database server."""


@dataclass(frozen=True)
class StopIntent:
    """A Nomad job that must be stopped; kept until Nomad confirms, retried with backoff."""

    job_id: str
    namespace: str
    reason: str
    created_at: float = 0.0
    attempts: int = 0
    next_at: float = 0.0


@dataclass(frozen=True)
class Admission:
    """One entry of a cycle's admissions, with the placements (stored JSON) it was admitted on."""

    entry_id: str
    placements: tuple[Mapping[str, Any], ...]


class SpaceSignal(Protocol):
    """Whom a store tells that space returned after a write failed for it."""

    def listen(self, returned: Callable[[], None]) -> None:
        """Call ``returned`` (quick, never blocking) each time a write succeeds after one failed for space."""


class Store(Protocol):
    """The queue's durable state: entries, stop intents and a few named values."""

    @property
    def instance(self) -> str:
        """This database's job ID prefix (six hex digits), made when the database is and never changed: two
        databases never share one, so two never share a Nomad job ID (`QueueEntry.nomad_job_id`)."""

    @property
    def created(self) -> bool:
        """Whether the database was made by this open (a new, lost or replaced one all look the same): the
        service then asks Nomad whether jobs of an earlier database still run."""

    @property
    def space(self) -> SpaceSignal:
        """Told when a write succeeds again after one failed for space (the watcher then resyncs)."""

    # ---- entries -------------------------------------------------------------------------------
    def add(self, entries: Sequence[QueueEntry], quota: TeamQuota | None = None, *,
            keep: Callable[[], Collection[str]] | None = None) -> builtins.list[QueueEntry]:
        """Store all or nothing; the entries as stored, in the order given.

        An entry with an empty ``id`` gets a fresh one, `q` and at least six digits (`q000123`), larger than
        every ID this database ever gave (retention never lets one be reused), and ``job_prefix``
        `instance` unless it has one. An entry whose ``idempotency_key`` is stored already is not stored
        again: the stored one is returned in its place. An entry whose ID is stored already is an error
        (the implementation's own) and nothing of the call is stored. With ``quota``, OverLimit (and
        nothing stored) when a team would hold more live (not terminal) entries than ``max_entries``, or
        more bytes of their specs as stored than ``max_stored_bytes``; a sweep's trials (entries of one
        ``sweep`` added together) keep their shared spec once and count it once. With ``quota`` too, a team
        that would keep more entries (live and finished) than ``max_kept_entries``, or more bytes than
        ``max_kept_bytes``, first loses its oldest finished entries, in the same transaction: never a live
        one, never the newest row, never an entry or sweep named by ``keep`` (asked only when pruning: the
        IDs queued entries wait for); their usage records stay (`usage_report` answers as before).
        """
        ...

    def get(self, entry_id: str) -> QueueEntry:
        """The entry as stored; UnknownEntry when there is none (never stored, or purged)."""
        ...

    def list(self, states: Iterable[EntryState] | None = None, sweep: str | None = None,
             limit: int | None = None, offset: int = 0, *, team: str | None = None,
             name_glob: str | None = None) -> builtins.list[QueueEntry]:
        """Entries in submission order (the order `add` stored them). Filters: ``states`` (None: any),
        ``sweep``, ``team``, ``name_glob`` (a case-sensitive shell-style glob of the name: ``*``, ``?``,
        ``[...]``, ``[!...]`` and ``[^...]``). Filters apply before the page (``offset``, then ``limit``)
        is cut; a team's rows are filtered by the store, never another team's decoded for its view."""
        ...

    def transition(self, entry_id: str, to: EntryState, *, expect: Iterable[EntryState] | None = None,
                   stop: StopIntent | None = None, durable: bool = True, **fields: Any) -> QueueEntry:
        """Move an entry to ``to`` and set ``fields``, as one compare-and-set; the entry as moved.

        StaleTransition, and nothing written, when the entry is not in one of ``expect`` (someone moved it
        first), when `TRANSITIONS` forbids the move, or when ``to`` is its state already with other
        ``placements`` (a second admission elsewhere); ``to`` equal to its state is allowed otherwise (a
        change of fields only). UnknownEntry when there is no such entry. The fields stored are
        ``attempts``, ``reason``, ``placements``, ``admitted_at``, ``finished_at``, ``registered_at``,
        ``refusals``, ``held`` and ``priority``; ``at`` is the time of the move, kept in its history
        event (``{"from", "to", "at", "reason"}``; the newest 20 are kept). With ``stop``, the intent is
        stored in the same transaction (`add_stop`), so an entry never ends without the intent to stop its
        job. ``durable=False``: a move the service re-derives from Nomad after a restart may commit
        without waiting for the disk (it still survives a crash of the process)."""
        ...

    def admit_many(self, admissions: Sequence[Admission], at: float) -> builtins.list[QueueEntry]:
        """A cycle's admissions, all or none: each entry moves queued -> admitted with its placements,
        ``admitted_at`` and ``at`` = ``at`` and an empty reason. When any one cannot (not queued:
        StaleTransition; unknown: UnknownEntry), it raises and every entry stays as it was."""
        ...

    def cancel_queued(self, entry_ids: Sequence[str], at: float, reason: str) -> set[str]:
        """Cancel those of ``entry_ids`` still queued, in one durable transaction; the IDs moved. Others
        (live, ended, unknown) are left alone. Each moved entry gets ``finished_at`` = ``at``, ``reason``
        and its history event, as `transition` would write them; the move is checked against `TRANSITIONS`
        like every other (StaleTransition if the table forbids it)."""
        ...

    def mark_registered(self, entry_id: str, attempt: int, at: float) -> bool:
        """Record that Nomad acknowledged attempt ``attempt``'s register (``registered_at`` = ``at``), only
        while the entry is still admitted or running on that attempt; False (nothing written) otherwise.
        Not durable (a resync re-derives it)."""
        ...

    def set_reasons(self, reasons: Mapping[str, str]) -> None:
        """Set why each queued entry waits (entry ID -> reason); entries no longer queued, or unknown, are
        left alone. Not durable, no history event."""
        ...

    def sweep_states(self, sweep: str, team: str | None = None) -> builtins.list[tuple[str, EntryState]]:
        """A sweep's trials as (ID, state) in submission order (only ``team``'s, if given), no spec read."""
        ...

    def sweep_count(self, sweep: str) -> SweepCount | None:
        """A sweep's trials counted by outcome, as of the last committed write, read without reading a
        trial: always equal to `store.counts.recount` of its stored trials. None: no trial of that sweep
        is stored."""
        ...

    def new_sweep_id(self, name: str) -> str:
        """`<name>-s<n>`, with ``n`` from a durable sequence of this database: never handed out twice, even
        after a restart or two submissions of one name at one instant."""
        ...

    def usage_report(self, by: str, since: float, until: float, now: float,
                     team: str | None = None) -> builtins.list[UsageTotals]:
        """GPU accounting over [``since``, ``until``] grouped ``by`` (team, class, kind or model), only
        ``team``'s if given, from a compact record per attempt kept in step with every move and kept when
        its entry is pruned or purged; never a decoded spec (store/usage.py defines the figures)."""
        ...

    def usage_intervals(self, since: float, until: float, now: float,
                        team: str | None = None) -> builtins.list[tuple[str, float, float, float]]:
        """Every attempt's (team, GPU-equivalents, start, end) within [``since``, ``until``], only ``team``'s
        if given, from the same record as `usage_report` (for what a team borrowed past its quota)."""
        ...

    def sweep_summaries(self, team: str | None = None) -> builtins.list[SweepSummary]:
        """Every sweep (only ``team``'s, if given) with its trials counted by state, without reading one."""
        ...

    def purge_finished(self, before: float) -> int:
        """Delete terminal entries that finished before ``before`` (retention); how many went. The newest
        entry is never deleted, so no ID is ever given again; `sweep_count` counts what remains."""
        ...

    # ---- stop intents ----------------------------------------------------------------------------
    def add_stop(self, stop: StopIntent) -> None:
        """Store the intent to stop a Nomad job, durably; an intent for the same (job, namespace) already
        stored is kept as it is (its attempts and next try)."""
        ...

    def stops(self, due_by: float | None = None) -> builtins.list[StopIntent]:
        """Stored stop intents, those with ``next_at`` <= ``due_by`` if given, by ``next_at`` then job ID."""
        ...

    def stop_done(self, job_id: str, namespace: str) -> None:
        """Nomad confirmed the stop: forget the intent (none stored: nothing happens)."""
        ...

    def stop_retry(self, job_id: str, namespace: str, next_at: float) -> None:
        """One more try failed: count it (``attempts`` + 1) and try again at ``next_at``."""
        ...

    # ---- named values and housekeeping -----------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``; None when none is."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``, durably, replacing what was there."""
        ...

    def checkpoint(self) -> None:
        """Housekeeping the scheduler asks for every few minutes (SQLite: fold its write-ahead log into the
        database and truncate it); changes nothing a read sees, and may do nothing."""
        ...

    def close(self) -> None:
        """Release the database (and the service's exclusive hold on it); the store is not used again."""
        ...
