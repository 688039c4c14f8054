"""Queue entries and their life cycle. `TRANSITIONS` is the whole table; the store enforces it.

    queued ──admit──► admitted ──Nomad placed──► running ──► complete | failed
      ▲  │ │             │                          │
      │  │ └─cancel─► cancelled ◄─────cancel──────────┘
      │  ├─an `after:` dependency failed or was cancelled─► dependency-failed
      │  └─its stored spec is no longer valid (a newer validator)─► failed
      └──── retry (failed/lost with retries left, or a register that did not happen) ───┘
    admitted | running ──its GPUs idle past its class's window, taken back for a waiting job──► reclaimed

    running ──preempt──► preempting ──every allocation terminal──► queued (a new attempt, no retry used)
                            │  (holds its capacity while Nomad      │
                            │   stops it with its checkpoint grace) └─► complete (it exited 0 in its grace)
                            └──cancel──► cancelled
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nomad_gpu.api.payloads import Entry, Placement


class EntryState(enum.Enum):
    QUEUED = "queued"
    ADMITTED = "admitted"
    """Capacity reserved and the job sent (or being sent) to Nomad, not yet seen placed."""
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEPENDENCY_FAILED = "dependency-failed"
    """An entry it waited for (`after:`) failed or was cancelled: it never ran, and never will."""
    RECLAIMED = "reclaimed"
    """Its GPUs sat idle past its class's window and were taken back for a waiting job (idle reclaim):
    neither its failure nor a user's cancel."""
    PREEMPTING = "preempting"
    """Its GPUs are taken back for a waiting job (DESIGN 17): Nomad stops it with its checkpoint grace, and
    it holds its capacity until every allocation is terminal; its reason names the preemptor and the node."""

    def is_terminal(self) -> bool:
        return self in (EntryState.COMPLETE, EntryState.FAILED, EntryState.CANCELLED, EntryState.DEPENDENCY_FAILED,
                        EntryState.RECLAIMED)

    def holds_capacity(self) -> bool:
        return self in (EntryState.ADMITTED, EntryState.RUNNING, EntryState.PREEMPTING)


TRANSITIONS: Mapping[EntryState, frozenset[EntryState]] = {
    EntryState.QUEUED: frozenset({EntryState.ADMITTED, EntryState.CANCELLED, EntryState.DEPENDENCY_FAILED,
                                  EntryState.FAILED}),
    EntryState.ADMITTED: frozenset({EntryState.RUNNING, EntryState.QUEUED, EntryState.COMPLETE,
                                    EntryState.FAILED, EntryState.CANCELLED, EntryState.RECLAIMED}),
    EntryState.RUNNING: frozenset({EntryState.COMPLETE, EntryState.FAILED, EntryState.QUEUED,
                                   EntryState.CANCELLED, EntryState.RECLAIMED, EntryState.PREEMPTING}),
    EntryState.PREEMPTING: frozenset({EntryState.QUEUED, EntryState.COMPLETE, EntryState.FAILED,
                                      EntryState.CANCELLED}),
    EntryState.COMPLETE: frozenset(),
    EntryState.FAILED: frozenset(),
    EntryState.CANCELLED: frozenset(),
    EntryState.DEPENDENCY_FAILED: frozenset(),
    EntryState.RECLAIMED: frozenset(),
}


@dataclass(frozen=True)
class QueueEntry:
    """One submitted job. `spec` is the validated job spec as plain JSON data."""

    id: str
    name: str
    team: str
    priority: int
    spec: Mapping[str, Any]
    submitted_at: float
    state: EntryState = EntryState.QUEUED
    attempts: int = 0
    """Registrations so far; the Nomad job ID carries it, so a retry is a new job, a repeat is not."""
    max_retries: int = 0
    reason: str = ""
    placements: tuple[Mapping[str, Any], ...] = ()
    admitted_at: float | None = None
    finished_at: float | None = None
    sweep: str | None = None
    idempotency_key: str | None = None
    history: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    job_prefix: str = ""
    """The database's instance prefix: two databases (a lost container volume) never share a job ID."""
    namespace: str = "default"
    """The Nomad namespace the entry's job lives in (its spec's, or the service's default)."""
    registered_at: float | None = None
    """When Nomad acknowledged this attempt's register; None until then (and for each new attempt)."""
    refusals: int = 0
    """Attempts that ended without using up a retry: Nomad refused to place them, or a user re-queued."""
    held: bool = False
    """A user holds it: it keeps its place in the queue but is not admitted until released."""

    @property
    def retries_used(self) -> int:
        return self.attempts - self.refusals

    @property
    def nomad_job_id(self) -> str:
        """Derived, never stored apart: the same entry and attempt always give the same Nomad job."""
        return job_id_of(self.id, self.attempts, self.job_prefix)

    def to_payload(self) -> Entry:
        """The entry as the API sends it (`nomad_gpu.api.payloads.Entry`)."""
        return Entry(
            id=self.id, name=self.name, team=self.team, priority=self.priority, state=self.state.value,
            submitted_at=self.submitted_at, attempts=self.attempts, max_retries=self.max_retries,
            reason=self.reason, nomad_job_id=self.nomad_job_id,
            placements=tuple(_placement(p) for p in self.placements), admitted_at=self.admitted_at,
            finished_at=self.finished_at, sweep=self.sweep, spec=dict(self.spec), namespace=self.namespace,
            registered_at=self.registered_at, refusals=self.refusals, held=self.held,
            preemptions=sum(1 for h in self.history if h.get("to") == EntryState.PREEMPTING.value),
        )

    def to_json(self) -> dict[str, Any]:
        return self.to_payload().to_json()


def _placement(stored: Mapping[str, Any]) -> Placement:
    """A stored placement (written by the service as this payload): built directly, read leniently only
    where it is not in today's form (a row an older release wrote)."""
    try:
        return Placement(**{**stored, "instance_ids": tuple(stored["instance_ids"])})
    except (TypeError, KeyError):
        return Placement.from_json(dict(stored))


JOB_PREFIX = "ngpu-"
_JOB_ID = re.compile(r"^ngpu-(?:(?P<inst>[0-9a-f]{6})-)?(?P<entry>q\d{6,})(?:-(?P<attempt>\d+))?$")


def job_id_of(entry_id: str, attempts: int, prefix: str = "") -> str:
    """`ngpu-<instance>-q000012[-attempt]`; entries stored before instance prefixes keep `ngpu-q000012`."""
    base = f"{JOB_PREFIX}{prefix}-{entry_id}" if prefix else f"{JOB_PREFIX}{entry_id}"
    return f"{base}-{attempts}" if attempts else base


@dataclass(frozen=True)
class JobRef:
    """What a Nomad job ID says about its owner: which database (instance), entry and attempt."""

    instance: str
    entry: str
    attempt: int


def parse_job_id(job_id: str) -> JobRef | None:
    """None for jobs that are not ours. `instance` is "" for the prefix-less IDs of older databases."""
    m = _JOB_ID.match(job_id)
    if m is None:
        return None
    return JobRef(m.group("inst") or "", m.group("entry"), int(m.group("attempt") or 0))


def entry_of_job(job_id: str) -> str | None:
    """`ngpu-<instance>-q000012-3` (or an older `ngpu-q000012`) -> `q000012`; None for jobs not ours."""
    ref = parse_job_id(job_id)
    return ref.entry if ref is not None else None


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class StoredRow(Protocol):
    """A row of either store's `entries` table, read by column name (`sqlite3.Row`, psycopg's dict rows)."""

    def __getitem__(self, column: str, /) -> Any: ...


def entry_of(r: StoredRow, spec: Mapping[str, Any]) -> QueueEntry:
    """The entry a stored row holds, with its spec already decoded (each store decodes its own)."""
    return QueueEntry(
        id=r["id"], name=r["name"], team=r["team"], priority=r["priority"], spec=spec,
        submitted_at=r["submitted_at"], state=EntryState(r["state"]), attempts=r["attempts"],
        max_retries=r["max_retries"], reason=r["reason"], placements=tuple(json.loads(r["placements"])),
        admitted_at=r["admitted_at"], finished_at=r["finished_at"], sweep=r["sweep"],
        idempotency_key=r["idempotency_key"], history=tuple(json.loads(r["history"])),
        job_prefix=r["job_prefix"], namespace=r["namespace"], registered_at=r["registered_at"],
        refusals=r["refusals"], held=bool(r["held"]),
    )
