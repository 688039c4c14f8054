"""One entry as Nomad sees it: its allocations, the HCL it was registered with, its tasks' logs.

Users ask "where did my job run, what exactly was sent, what did it print" by entry ID; the
allocation IDs, versions and task names those answers need live in Nomad, so they are read from
Nomad when asked (never cached here: Nomad is the source of truth for what runs) and every read
has a timeout. The service keeps only what it decided; the times it recorded are summed up by
:func:`timeline` for ``status ID``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nomad_gpu.api.payloads import Allocation, Hcl
from nomad_gpu.domain.errors import InvalidRequest, StateConflict, UnknownEntry, UpstreamFailed
from nomad_gpu.nomad.client import NomadError, NomadNotFound
from nomad_gpu.store import EntryState, QueueEntry

logger = logging.getLogger(__name__)

LOG_TYPES = ("stdout", "stderr")
LOG_READ_TIMEOUT_S = 10.0
TERMINAL_ALLOC = ("complete", "failed", "lost")


class NomadReads(Protocol):
    """The reads this module makes (nomad_gpu.nomad.client.NomadClient has them)."""

    def job(self, job_id: str, namespace: str | None = None) -> dict[str, Any] | None: ...
    def job_allocations(self, job_id: str, namespace: str | None = None) -> list[dict[str, Any]]: ...
    def job_submission(self, job_id: str, version: int, namespace: str | None = None) -> dict[str, Any] | None: ...
    def task_logs(self, alloc_id: str, task: str, log_type: str, *, offset: int = 0, origin: str = "start",
                  timeout_s: float | None = None) -> bytes: ...


def nomad_ui_url(nomad_address: str, job_id: str, namespace: str) -> str:
    """The job's page in Nomad's web UI (`ui/app/router.js`: `jobs/<id>@<namespace>`)."""
    return f"{nomad_address.rstrip('/')}/ui/jobs/{job_id}@{namespace}"


def started_at(entry: QueueEntry) -> float | None:
    """When Nomad first reported the current attempt running (the last move into `running`)."""
    for event in reversed(entry.history):
        if event.get("to") == EntryState.RUNNING.value and isinstance(event.get("at"), (int, float)):
            return float(event["at"])
        if event.get("to") == EntryState.QUEUED.value:
            return None  # the attempt before a retry does not count
    return None


def timeline(entry: QueueEntry, now: float) -> dict[str, Any]:
    """Submitted / admitted / started / finished, and how long the entry waited and ran (seconds)."""
    began = started_at(entry)
    admitted = entry.admitted_at if entry.state is not EntryState.QUEUED else None
    waited_until = admitted if admitted is not None else (entry.finished_at or now)
    ran: float | None = None
    if began is not None:
        ran = max((entry.finished_at if entry.state.is_terminal() and entry.finished_at else now) - began, 0.0)
    return {"submitted_at": entry.submitted_at, "admitted_at": admitted, "started_at": began,
            "finished_at": entry.finished_at, "waited_s": max(waited_until - entry.submitted_at, 0.0), "ran_s": ran}


@dataclass(frozen=True)
class AllocView:
    id: str
    group: str
    index: int
    node_id: str
    node_name: str
    client_status: str
    desired_status: str
    tasks: tuple[str, ...]
    create_index: int

    def to_payload(self) -> Allocation:
        return Allocation(self.id, self.group, self.index, self.node_id, self.node_name, self.client_status,
                          self.desired_status, self.tasks)

    def to_json(self) -> dict[str, Any]:
        return self.to_payload().to_json()


def _alloc_view(raw: Mapping[str, Any]) -> AllocView:
    name = str(raw.get("Name") or "")
    index = 0
    if name.endswith("]") and "[" in name:
        digits = name[name.rfind("[") + 1:-1]
        index = int(digits) if digits.isdigit() else 0
    return AllocView(id=str(raw.get("ID") or ""), group=str(raw.get("TaskGroup") or ""), index=index,
                     node_id=str(raw.get("NodeID") or ""), node_name=str(raw.get("NodeName") or ""),
                     client_status=str(raw.get("ClientStatus") or ""),
                     desired_status=str(raw.get("DesiredStatus") or ""),
                     tasks=tuple(sorted((raw.get("TaskStates") or {}).keys())),
                     create_index=int(raw.get("CreateIndex") or 0))


class JobDetail:
    """Reads for one entry's Nomad job. What cannot be answered is an error of the tree: UnknownEntry (not
    there), StateConflict (not for an entry in its state), InvalidRequest, UpstreamFailed (Nomad)."""

    def __init__(self, nomad: NomadReads) -> None:
        self.nomad = nomad

    def allocations(self, entry: QueueEntry) -> list[AllocView]:
        """The current attempt's allocations, oldest first (none before it was registered)."""
        if entry.state is EntryState.QUEUED:
            return []
        try:
            raw = self.nomad.job_allocations(entry.nomad_job_id, namespace=entry.namespace)
        except NomadError as exc:
            raise UpstreamFailed(f"cannot read the allocations from Nomad: {exc}") from exc
        views = [_alloc_view(a) for a in raw if isinstance(a, Mapping)]
        return sorted(views, key=lambda v: (v.create_index, v.group, v.index))

    def hcl(self, entry: QueueEntry) -> Hcl:
        """The HCL Nomad stored with the job's current version (Nomad keeps it with the job)."""
        if entry.state is EntryState.QUEUED or (entry.state is EntryState.CANCELLED and entry.admitted_at is None):
            raise StateConflict(f"{entry.id} was never sent to Nomad ({entry.state.value}): no HCL registered")
        try:
            job = self.nomad.job(entry.nomad_job_id, namespace=entry.namespace)
            version = int((job or {}).get("Version") or 0)
            submission = self.nomad.job_submission(entry.nomad_job_id, version, namespace=entry.namespace)
        except NomadError as exc:
            raise UpstreamFailed(f"cannot read the job from Nomad: {exc}") from exc
        if submission is None:
            raise UnknownEntry(f"Nomad keeps no source for job {entry.nomad_job_id} version {version} "
                                   "(the job was collected, or registered without its HCL)")
        return Hcl(entry.id, entry.nomad_job_id, entry.namespace, version, str(submission.get("Format") or ""),
                   str(submission.get("Source") or ""))

    def logs(self, entry: QueueEntry, log_type: str, offset: int, *, group: str | None = None,
             index: int | None = None, task: str | None = None) -> tuple[bytes, AllocView, str]:
        """The bytes of one task's log from ``offset``, the allocation and task they came from."""
        if log_type not in LOG_TYPES:
            raise InvalidRequest(f"type must be stdout or stderr, not {log_type!r}")
        if entry.state is EntryState.QUEUED:
            raise StateConflict(f"{entry.id} is queued: it has no logs until it runs")
        alloc = pick_alloc(self.allocations(entry), group, index)
        if alloc is None:
            where = "" if group is None and index is None else f" for group {group or '*'} index {index}"
            raise UnknownEntry(f"{entry.id}: Nomad has no allocation of job {entry.nomad_job_id}{where}")
        name = task or (alloc.tasks[0] if len(alloc.tasks) == 1 else None)
        if name is None:
            raise InvalidRequest(f"allocation {alloc.id[:8]} runs tasks {', '.join(alloc.tasks) or '(none yet)'}: "
                                   "name one with task=")
        try:
            data = self.nomad.task_logs(alloc.id, name, log_type, offset=offset, timeout_s=LOG_READ_TIMEOUT_S)
        except NomadNotFound as exc:
            raise UnknownEntry(str(exc)) from exc
        except NomadError as exc:
            raise UpstreamFailed(f"cannot read the logs from Nomad: {exc}") from exc
        return data, alloc, name


def pick_alloc(allocs: Sequence[AllocView], group: str | None, index: int | None) -> AllocView | None:
    """The newest allocation of the asked group and index (default: the first group and index)."""
    chosen = [a for a in allocs if (group is None or a.group == group) and (index is None or a.index == index)]
    if not chosen:
        return None
    first = min((a.group, a.index) for a in chosen)
    same = [a for a in chosen if (a.group, a.index) == first]
    return max(same, key=lambda a: a.create_index)
