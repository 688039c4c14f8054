"""Stopping an allocation takes its tasks' kill_timeout: its devices stay held until the task is gone.

When an allocation's desired status becomes `stop`, Nomad's client kills its tasks
(`allocRunner.killTasks`, client/allocrunner/alloc_runner.go, v2.0.5): a `Killing` event ("Sent
interrupt. Waiting 5s before force killing", `TaskEvent.PopulateEventDisplayMessage`,
nomad/structs/structs.go), the signal, then up to the task's `kill_timeout` before the driver forces
it (`TaskRunner.handleKill` and `killTask`, client/allocrunner/taskrunner/task_runner.go). Only then is
the task dead and the allocation `complete`, and only then does Nomad's scheduler count its devices
free again. A dev-cluster task never exits on the signal, so each stop takes the whole kill_timeout
(as strict as Nomad allows: never quicker), scaled by the cluster's speed. An allocation whose tasks
never started ends at once.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from . import clienttruth, services
from .allocs import Alloc, ClientStatus
from .restarts import go_duration

if TYPE_CHECKING:
    from .state import ClusterState

KILLED = "Task successfully killed"
_SECOND = 10**9
MAX_KILL_TIMEOUT_S = 30.0
"""The client's `max_kill_timeout` (command/agent/config.go `DefaultConfig`, "30s", v2.0.5): a task's
kill_timeout is capped at it (`min(task.KillTimeout, maxKillTimeout)`, `NewDriverHandle` in
client/allocrunner/taskrunner/driver_handle.go; the Killing event too, `TaskEvent.SetKillTimeout`)."""


def kill_timeout_s(alloc: Alloc) -> float:
    """The longest `KillTimeout` of the allocation's tasks, in seconds (5 s by default, `canonicalize`),
    capped at the client's `max_kill_timeout`."""
    groups = [g for g in alloc.job.get("TaskGroups") or [] if g.get("Name") == alloc.task_group]
    timeouts = [int(task.get("KillTimeout") or 5 * _SECOND) for g in groups for task in g.get("Tasks") or []]
    return min(max(timeouts, default=5 * _SECOND) / _SECOND, MAX_KILL_TIMEOUT_S)


def stop(state: ClusterState, allocs: list[Alloc], why: str, migrate: bool | None, desired: str = "stop") -> None:
    """Desired `stop` (or `evict`, for a preemption: systemjobs.py) in a `PlanResult` frame, then each
    allocation ends after its kill_timeout."""
    now = state.clock()
    index = state._next_index()
    for alloc in allocs:
        alloc.set_desired(desired, why, index, now, migrate)
    state._emit(index, [alloc.event("PlanResult", index) for alloc in allocs])
    kill(state, allocs)


def kill(state: ClusterState, allocs: list[Alloc]) -> None:
    """The client's side of a stop whose desired status is written: each ends after its kill_timeout. A
    client cut off from the servers hears of it only when it reconnects (partitions.py `heal`)."""
    now = state.clock()
    allocs = [a for a in allocs if not clienttruth.cut_off(state, a.node_id)]
    at_once = [a for a in allocs if a.live and a.client_status is not ClientStatus.RUNNING]
    if at_once:
        state._finish(at_once, ClientStatus.COMPLETE, detail=KILLED)
        for alloc in at_once:
            _started_preemptor(state, alloc)
    running = [a for a in allocs if a.client_status is ClientStatus.RUNNING]
    if not running:
        return
    # the group's services go first: `groupServiceHook.PreKill` deregisters them before the tasks are
    # killed (client/allocrunner/group_service_hook.go, v2.0.5)
    services.on_stopped(state, {alloc.id for alloc in running})
    index = state._next_index()
    for alloc in running:
        timeout = kill_timeout_s(alloc)
        alloc.killing(index, now, f"Sent interrupt. Waiting {go_duration(timeout)} before force killing")
        state.timers.call_at(now + timeout / state.speed, functools.partial(_killed, state, alloc.id))
    state._emit(index, [alloc.event("AllocationUpdated", index) for alloc in running])


def _killed(state: ClusterState, alloc_id: str) -> None:
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is not None and clienttruth.unheard(state, alloc):  # its node was cut off meanwhile
            clienttruth.task_ended(state, alloc, ClientStatus.COMPLETE, KILLED)
            return
        if alloc is None or not alloc.live:
            return  # lost meanwhile (its node went down), or already ended
        state._finish([alloc], ClientStatus.COMPLETE, detail=KILLED)
        _started_preemptor(state, alloc)
        state._schedule()  # its devices are free now: a blocked placement may fit


def _started_preemptor(state: ClusterState, victim: Alloc) -> None:
    """The client starts a preempting allocation only once its victims are gone (systemjobs.py)."""
    if victim.preempted_by:
        state.timers.call_soon(functools.partial(state.on_start, victim.preempted_by))
