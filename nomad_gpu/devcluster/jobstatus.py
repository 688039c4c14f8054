"""A registered job's status (`pending`, `running`, `dead`), derived from its allocations and queue.

It exists on its own because three modules ask it: the read views (`queries.py`), the job GC
(`gc.py`) and namespace deletion (`namespaces.py`). The state module imports the last two, and the read
views import the state module, so the status must sit below all of them for the imports to run one way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .records import JobRecord

if TYPE_CHECKING:
    from .state import ClusterState


def job_status(state: ClusterState, record: JobRecord) -> str:
    """`pending`, `running` or `dead` (`nomad/state/state_store.go` getJobStatus, v2.0.5): running
    while an allocation is not `TerminalStatus()`, pending while placements wait (a blocked
    evaluation), else dead. `Allocation.TerminalStatus` (nomad/structs/structs.go, v2.0.5) is
    terminal on the server side too: an allocation told to stop or evict no longer keeps its job
    running, though its task may still be inside `kill_timeout`."""
    key = (record.job["Namespace"], record.job["ID"])
    if any(a.desired_status not in ("stop", "evict") for a in state.live_allocs(key, record.job["CreateIndex"])):
        return "running"
    if not record.job["Stop"] and any((p.namespace, p.job_id) == key for p in state.pending):
        return "pending"
    return "dead"
