"""When the `job_summary` table is written: half of what `GET /v1/jobs` answers as `X-Nomad-Index`.

`Job.List` answers `max(state.Index("jobs"), state.Index("job_summary"))` (nomad/job_endpoint.go,
v2.0.5), so a client that blocks on the jobs list wakes when an allocation changes a summary, not only
when a job is written. The state store writes the summary's index (nomad/state/state_store.go):
- `updateSummaryWithAlloc`: an allocation is new, or its client status changed (a desired-status
  change alone leaves the summary as it was);
- `nestedUpsertEval`: an evaluation's `QueuedAllocations` differ from the summary's `Queued`;
- job writes (`updateSummaryWithJob`, `setJobSummary`), which also write the jobs table.
The dev cluster reads these off the events each write publishes (state.py `_emit`).
"""

from __future__ import annotations

from .events import Event


class SummaryIndex:
    def __init__(self) -> None:
        self._client_status: dict[str, str] = {}  # alloc ID -> the client status the summary counts
        self._queued: dict[tuple[str, str, str], int] = {}  # (namespace, job, group) -> Queued

    def changes(self, event: Event) -> bool:
        """Whether the write that published `event` wrote a job summary."""
        if event.topic == "Job":
            return True
        if event.topic == "Allocation":
            alloc = event.payload.get("Allocation") or {}
            status = str(alloc.get("ClientStatus", ""))
            before = self._client_status.get(str(alloc.get("ID")))
            self._client_status[str(alloc.get("ID"))] = status
            return before != status
        if event.topic == "Evaluation":
            evaluation = event.payload.get("Evaluation") or {}
            changed = False
            for group, queued in (evaluation.get("QueuedAllocations") or {}).items():
                key = (str(evaluation.get("Namespace")), str(evaluation.get("JobID")), str(group))
                changed = changed or self._queued.get(key, 0) != queued
                self._queued[key] = int(queued)
            return changed
        return False
