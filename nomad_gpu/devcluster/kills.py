"""Stopping an allocation takes its tasks' kill_timeout: its devices stay held until the task is gone.

When an allocation's desired status becomes `stop`, Nomad's client kills its tasks
(`allocRunner.killTasks`, client/allocrunner/alloc_runner.go, v2.0.5): a `Killing` event ("Sent
interrupt. Waiting 5s before force killing", `TaskEvent.PopulateEventDisplayMessage`,
nomad/structs/structs.go), the signal, then up to the task's `kill_timeout` before the driver forces
it (`TaskRunner.handleKill` and `killTask`, client/allocrunner/taskrunner/task_runner.go). Only then is
the task dead and the allocation `complete`, and only then does Nomad's scheduler count its devices
free again. The driver sends the task's `kill_signal` (`DriverHandle.Kill`, driver_handle.go; docker's
default SIGTERM, `parseSignal` in drivers/docker/handle.go; the executor's SIGINT,
drivers/shared/executor/executor.go `Shutdown`), then forces it at the kill_timeout: docker reports exit
code 137, the executor 137 and signal 9 (`exitSignalBase + signal`). The task's exit result is a
`Terminated` event, then `Killed` (`handleKill`, `emitExitResultEvent`, `shouldRestart`).

A dev-cluster task ignores the signal unless its meta `nomad_gpu_dev_exit_on_signal_after_s` says it
handles it (a task that checkpoints): then it exits 0 that many seconds after the signal, if that is
inside the capped grace; otherwise, and always for the uncatchable SIGKILL, it is forced. So a stop
takes the whole kill_timeout unless the job says otherwise (as strict as Nomad allows: never quicker),
on the cluster's clock. An allocation whose tasks never started ends at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import clienttruth, services
from .allocs import Alloc, ClientStatus
from .restarts import go_duration

if TYPE_CHECKING:
    from .state import ClusterState

KILLED = clienttruth.KILLED
META_EXIT_ON_SIGNAL = "nomad_gpu_dev_exit_on_signal_after_s"
FORCED_EXIT_CODE = 137  # 128 + SIGKILL, what docker and the executor report for a forced task
_SIGKILL = 9
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


@dataclass(frozen=True)
class KillOutcome:
    """How a kill ends: after how many seconds of the cluster's clock, with which exit result."""

    after_s: float
    exit_code: int
    exit_signal: int
    signals: dict[str, str]  # the signal each task received


def default_signal(driver: str) -> str:
    """The signal a driver sends when the task names none: docker SIGTERM, the executor's drivers SIGINT."""
    return "SIGTERM" if driver == "docker" else "SIGINT"


def outcome(alloc: Alloc) -> KillOutcome:
    """Whether the tasks exit by themselves inside the capped grace (exit 0) or are forced at its end."""
    timeout = kill_timeout_s(alloc)
    tasks = _tasks(alloc)
    signals = {str(t.get("Name")): str(t.get("KillSignal") or default_signal(str(t.get("Driver")))) for t in tasks}
    docker = all(t.get("Driver") == "docker" for t in tasks)
    forced_signal = 0 if docker else _SIGKILL  # docker's exit result carries no signal (drivers/docker/handle.go)
    if "SIGKILL" in signals.values():
        return KillOutcome(0.0, FORCED_EXIT_CODE, forced_signal, signals)
    exits = [_exit_after_s(alloc, task) for task in tasks]
    handled = [after for after in exits if after is not None and after < timeout]
    if exits and len(handled) == len(exits):
        return KillOutcome(max(handled), 0, 0, signals)
    return KillOutcome(timeout, FORCED_EXIT_CODE, forced_signal, signals)


def _tasks(alloc: Alloc) -> list[dict[str, Any]]:
    groups = [g for g in alloc.job.get("TaskGroups") or [] if g.get("Name") == alloc.task_group]
    return [task for group in groups for task in group.get("Tasks") or []]


def _exit_after_s(alloc: Alloc, task: dict[str, Any]) -> float | None:
    """The task's `nomad_gpu_dev_exit_on_signal_after_s` (job < group < task meta), or None."""
    groups = [g for g in alloc.job.get("TaskGroups") or [] if g.get("Name") == alloc.task_group]
    meta: dict[str, Any] = dict(alloc.job.get("Meta") or {})
    for group in groups:
        meta.update(group.get("Meta") or {})
    meta.update(task.get("Meta") or {})
    try:
        after = float(meta[META_EXIT_ON_SIGNAL])
    except (KeyError, TypeError, ValueError):
        return None
    return after if after >= 0 else None


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
        timeout = go_duration(kill_timeout_s(alloc))
        ends = outcome(alloc)
        alloc.kill_signals, alloc.kill_exit_signal = ends.signals, ends.exit_signal
        alloc.killing(index, now, f"Sent interrupt. Waiting {timeout} before force killing", timeout)
        state.timers.call_at(now + ends.after_s / state.speed, functools.partial(_killed, state, alloc.id, ends))
    state._emit(index, [alloc.event("AllocationUpdated", index) for alloc in running])


def _killed(state: ClusterState, alloc_id: str, ends: KillOutcome) -> None:
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is not None and clienttruth.unheard(state, alloc):  # its node was cut off meanwhile
            clienttruth.task_ended(state, alloc, ClientStatus.COMPLETE, KILLED)
            return
        if alloc is None or not alloc.live:
            return  # lost meanwhile (its node went down), or already ended
        state._finish([alloc], ClientStatus.COMPLETE, detail=KILLED, exit_code=ends.exit_code)
        _started_preemptor(state, alloc)
        state._schedule()  # its devices are free now: a blocked placement may fit


def _started_preemptor(state: ClusterState, victim: Alloc) -> None:
    """The client starts a preempting allocation only once its victims are gone (systemjobs.py)."""
    if victim.preempted_by:
        state.timers.call_soon(functools.partial(state.on_start, victim.preempted_by))
