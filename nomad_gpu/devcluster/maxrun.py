"""A batch group's `max_run_duration`: from Nomad 2.0.3 the client ends the allocation at a deadline.

Nomad 2.0.3 added `max_run_duration` to the task group (#27803: `TaskGroup.MaxRunDuration`,
`api/tasks.go` and `nomad/structs/structs.go` v2.0.3; absent from both in v2.0.2). Where it exists:

* `TaskGroup.Validate` (nomad/structs/structs.go v2.0.3) refuses a value that is not positive
  ("MaxRunDuration must be greater than zero") and any job type but batch and sysbatch
  (`Job type "service" does not allow max_run_duration`);
* the client arms a timer in `maxRunDurationHook` (client/allocrunner/max_run_duration_hook.go
  v2.0.3, `resetTimer` and `currentDeadline`), anchored to the allocation's `CreateTime`, not to
  the task's start, and enforces at once when the deadline has already passed;
* at the deadline `allocRunner.EnforceMaxRunDurationTimeout` (client/allocrunner/alloc_runner.go
  v2.0.3) forces the client status to `complete` with the description
  "allocation exceeded max_run_duration" (`AllocTimeoutReasonMaxRunDuration`, nomad/structs/alloc.go)
  and kills the tasks; `killTasks` gives each running task a `Killing` event with that display
  message. The task is killed, not failed, so nothing restarts or reschedules it.

Before 2.0.3 the HCL parser refuses the attribute ("Unsupported argument", hcl.py does that by not
reading it) and the JSON decoder of `Job.Register` ignores the unknown field (`decodeBody`,
command/agent/http.go, no `DisallowUnknownFields`): the job then runs without a deadline, which is
why the service keeps its own timer.

The dev cluster sets the client status to `complete` and ends the tasks in the same frame: Nomad's
client status is already `complete` while the tasks take up to their `kill_timeout` to die, so the
scheduler counts the devices free at the deadline in both.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .allocs import Alloc, ClientStatus
from .kills import KILLED
from .version import NomadVersion

if TYPE_CHECKING:
    from .state import ClusterState

JSON = dict[str, Any]
FIELD = "MaxRunDuration"
EXCEEDED = "allocation exceeded max_run_duration"
_BATCH_TYPES = ("batch", "sysbatch")
_SECOND = 10**9


def has_max_run_duration(version: object) -> bool:
    """Whether the Nomad version played knows the field (2.0.3 and later)."""
    parsed = version if isinstance(version, NomadVersion) else NomadVersion.parse(str(version))
    return parsed.has_max_run_duration


def admit(job: JSON, version: object) -> list[str]:
    """The `TaskGroup.Validate` errors for the field, or, before 2.0.3, the field dropped as Go's
    JSON decoder drops an unknown one. Mutates `job` (a canonical copy) in the latter case."""
    known = has_max_run_duration(version)
    errors: list[str] = []
    for group in job.get("TaskGroups") or []:
        if FIELD not in group:
            continue
        if not known:
            del group[FIELD]
            continue
        value = group[FIELD]
        if value is None:
            continue
        prefix = f"Task group {group.get('Name')} validation failed"
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            errors.append(f"{prefix}: MaxRunDuration must be greater than zero")
        if job.get("Type") not in _BATCH_TYPES:
            errors.append(f'{prefix}: Job type "{job.get("Type")}" does not allow max_run_duration')
    return errors


def limit_s(alloc: Alloc) -> float | None:
    """The allocation's group `MaxRunDuration` in seconds, or None when it has none."""
    for group in alloc.job.get("TaskGroups") or []:
        if group.get("Name") == alloc.task_group:
            value = group.get(FIELD)
            return value / _SECOND if isinstance(value, int) and value > 0 else None
    return None


def arm(state: ClusterState, alloc: Alloc) -> None:
    """Schedule the deadline `CreateTime + MaxRunDuration` (scaled by the cluster's speed)."""
    limit = limit_s(alloc)
    if limit is None or not has_max_run_duration(state.nomad_version):
        return
    state.timers.call_at(alloc.created_at + limit / state.speed, functools.partial(enforce, state, alloc.id))


def enforce(state: ClusterState, alloc_id: str) -> None:
    """`EnforceMaxRunDurationTimeout`: the allocation is `complete`, its tasks killed."""
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is None or not alloc.live or alloc.desired_status != "run":
            return  # ended, lost, or already being stopped (`currentDeadline` disarms then)
        alloc.max_run_exceeded = True
        index = state._next_index()
        now = state.clock()
        if alloc.client_status is ClientStatus.RUNNING:
            alloc.killing(index, now, EXCEEDED)
        state._finish([alloc], ClientStatus.COMPLETE, detail=KILLED)
        state._schedule()
