"""Allocations: their client-status state machine and the JSON Nomad serves for them.

The state machine is written down once (`TRANSITIONS`) and `Alloc.move` is the only way to change
`ClientStatus`, so an impossible transition (complete -> running) is a loud bug rather than a
silently wrong event stream. The JSON follows reference section 3: the full object carries
`AllocatedResources` with the task devices; stubs carry them only on `/v1/allocations?resources=true`;
times are Unix nanoseconds; event payloads are the full object with `Job: null`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from . import ports as port_json
from .events import Event
from .jobs import TaskAsk
from .placement import DeviceChoice
from .ports import AllocatedPort, NetworkAsk
from .restarts import RestartPolicy

JSON = dict[str, Any]
_ZERO_TIME = "0001-01-01T00:00:00Z"


class ClientStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    LOST = "lost"
    UNKNOWN = "unknown"
    """Its node missed its heartbeats and the group keeps it (`disconnect { replace = false }` or
    `lost_after`): not client-terminal, so its devices stay counted (scheduler/feasible/context.go, v2.0.5)."""

    def is_terminal(self) -> bool:
        return self in (ClientStatus.COMPLETE, ClientStatus.FAILED, ClientStatus.LOST)


TRANSITIONS: dict[ClientStatus, frozenset[ClientStatus]] = {
    ClientStatus.PENDING: frozenset({ClientStatus.RUNNING, ClientStatus.COMPLETE, ClientStatus.FAILED,
                                     ClientStatus.LOST}),
    # running -> pending: a task restarting in place (`getClientStatus`, allocrunner/alloc_runner.go v2.0.5)
    ClientStatus.RUNNING: frozenset({ClientStatus.PENDING, ClientStatus.COMPLETE, ClientStatus.FAILED,
                                     ClientStatus.LOST, ClientStatus.UNKNOWN}),
    ClientStatus.COMPLETE: frozenset(),
    ClientStatus.FAILED: frozenset(),
    # a reconnecting client's report overwrites the servers' verdict: the state store takes ClientStatus from
    # the client (`nestedUpdateAllocFromClient`, nomad/state/state_store.go, v2.0.5 and v1.10.5), so a lost
    # allocation the client killed on reconnect ends `complete`, an unknown one runs on (partitions.py)
    ClientStatus.LOST: frozenset({ClientStatus.COMPLETE, ClientStatus.FAILED}),
    ClientStatus.UNKNOWN: frozenset({ClientStatus.RUNNING, ClientStatus.COMPLETE, ClientStatus.FAILED,
                                     ClientStatus.LOST}),
}

_DESCRIPTIONS = {
    ClientStatus.PENDING: "No tasks have started",
    ClientStatus.RUNNING: "Tasks are running",
    ClientStatus.COMPLETE: "All tasks have completed",
    ClientStatus.FAILED: "Failed tasks",
    ClientStatus.LOST: "alloc is lost since its node is down",
    ClientStatus.UNKNOWN: "alloc is unknown since its node is disconnected",  # scheduler/structs/const.go v2.0.5
}


class InvalidTransition(RuntimeError):
    pass


def _exit_message(code: int, signal: int) -> str:
    """A `Terminated` event's display message (`PopulateEventDisplayMessage`, nomad/structs/structs.go v2.0.5)."""
    return f"Exit Code: {code}" + (f", Signal: {signal}" if signal else "")


def _exit_details(code: int, signal: int) -> dict[str, str]:
    """`emitExitResultEvent` (taskrunner/task_runner.go v2.0.5) sets all three, zero or not."""
    return {"exit_code": str(code), "signal": str(signal), "oom_killed": "false"}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _rfc3339(seconds: float | None) -> str:
    if seconds is None:
        return _ZERO_TIME
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Alloc:
    """One allocation, with the audit times the dev cluster records for it."""

    id: str
    eval_id: str
    namespace: str
    job_id: str
    job_type: str
    job_version: int
    job_create_index: int
    job: JSON
    task_group: str
    name_index: int
    node_id: str
    node_name: str
    tasks: tuple[TaskAsk, ...]
    devices: tuple[DeviceChoice, ...]
    duration_s: float
    fails: bool
    create_index: int
    registered_at: float
    created_at: float
    share_gpu: str | None = None
    share_milli: int | None = None
    previous_allocation: str = ""
    next_allocation: str = ""
    desired_status: str = "run"
    desired_description: str = ""
    migrate: bool | None = None
    disable_placement: bool | None = None  # DesiredTransition.MigrateDisablePlacement (1.11+)
    client_status: ClientStatus = ClientStatus.PENDING
    modify_index: int = 0
    alloc_modify_index: int = 0
    modify_time: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    terminal_event_at: float | None = None
    task_events: dict[str, list[JSON]] = field(default_factory=dict)
    restart: RestartPolicy | None = None  # the group's `restart` block; None: no restarts, fail on error
    restarts: int = 0  # TaskState.Restarts
    last_restart: float | None = None
    restart_count: int = 0  # the restart tracker's count and interval start (restarts.py)
    restart_window_start: float = 0.0
    max_run_exceeded: bool = False  # ended by its group's max_run_duration (maxrun.py)
    ports: tuple[AllocatedPort, ...] = ()  # the host ports of its group network (ports.py)
    network: NetworkAsk | None = None
    node_address: str = ""
    preempted_allocations: list[str] | None = None  # what this one evicted (systemjobs.py)
    preempted_by: str = ""  # the allocation that evicted this one
    task_ended_at: float | None = None
    """Client truth: when its tasks really stopped on the node (a lost allocation's may run on: partitions.py)."""
    lost_at: float | None = None
    """When the servers marked it `lost` or `unknown` (its node missed its heartbeats)."""
    late_report: ClientStatus | None = None
    """How its tasks ended on a cut-off node: what the client reports once it reconnects (partitions.py)."""
    late_detail: str = ""
    late_exit_code: int | None = None
    """With `late_report`: a kill's message and the task's exit code, reported with it."""
    stopped_by_client: bool = False
    """Its client began killing it itself, cut off past `stop_on_client_after` (client/heartbeatstop.go): no
    success, even when the task's own exit comes inside the kill window."""
    kill_signals: dict[str, str] = field(default_factory=dict)  # the signal each task received (kills.py)
    kill_exit_signal: int = 0  # the signal in the exit result of a kill (kills.py)

    def __post_init__(self) -> None:
        self.modify_index = self.alloc_modify_index = self.create_index
        self.modify_time = self.created_at
        for task in self.tasks:
            self._task_event(task.name, "Received", "Task received by client", self.created_at)

    @property
    def name(self) -> str:
        return f"{self.job_id}.{self.task_group}[{self.name_index}]"

    @property
    def live(self) -> bool:
        return not self.client_status.is_terminal()

    @property
    def device_ids(self) -> list[str]:
        return [i for choice in self.devices for i in choice.ids]

    def move(self, to: ClientStatus, index: int, now: float, detail: str = "", *, exit_code: int | None = None,
             restart_reason: str = "") -> None:
        """The only way ClientStatus changes; checks the transition table.

        A task that exited by itself gets Nomad's events (`TaskRunner.Run` and `shouldRestart`,
        task_runner.go v2.0.5): `Terminated` with its exit code, then `Not Restarting` (which fails the
        task) when `to` is failed; `detail` is a kill's message instead, after a `Terminated` with the
        driver's exit result when the killed task had one (`exit_code`: `handleKill`, then
        `emitExitResultEvent`; a task that never started has none)."""
        if to not in TRANSITIONS[self.client_status]:
            raise InvalidTransition(f"alloc {self.id}: {self.client_status.value} -> {to.value}")
        restarting = self.client_status is ClientStatus.RUNNING and to is ClientStatus.PENDING
        reconnected = self.client_status is ClientStatus.UNKNOWN
        self.client_status = to
        self.modify_index, self.modify_time = index, now
        if to is ClientStatus.RUNNING and not reconnected:
            if self.started_at is None:
                self.started_at = now
            for task in self.tasks:
                self._task_event(task.name, "Started", "Task started by client", now)
        elif restarting:
            self.restarts += 1
            self.last_restart = now
            for task in self.tasks:
                self._task_event(task.name, "Terminated", f"Exit Code: {exit_code or 0}", now, exit_code or 0)
                self._task_event(task.name, "Restarting", restart_reason, now)
        elif to.is_terminal():
            self.finished_at = now
            if self.task_ended_at is None:
                self.task_ended_at = now
            if to is not ClientStatus.LOST:
                code = exit_code if exit_code is not None else (1 if to is ClientStatus.FAILED else 0)
                for task in self.tasks:
                    if detail:
                        if exit_code is not None:
                            self._task_event(task.name, "Terminated", _exit_message(code, self.kill_exit_signal), now,
                                             code, details=_exit_details(code, self.kill_exit_signal))
                        self._task_event(task.name, "Killed", detail, now, code)
                        continue
                    self._task_event(task.name, "Terminated", f"Exit Code: {code}", now, code)
                    if to is ClientStatus.FAILED:
                        self._task_event(task.name, "Not Restarting",
                                         restart_reason or "Task exceeded restart policy", now)

    def killing(self, index: int | None, now: float, message: str, kill_timeout: str = "") -> None:
        """The client began killing the tasks (kills.py): a `Killing` event each; still running.
        `kill_timeout` is the capped grace as Go prints it, in `Details` (`TaskEvent.SetKillTimeout`).
        `index` None: a cut-off client's own kill, which the servers hear of only on reconnect."""
        if index is not None:
            self.modify_index, self.modify_time = index, now
        for task in self.tasks:
            self._task_event(task.name, "Killing", message, now,
                             details={"kill_timeout": kill_timeout} if kill_timeout else None)

    def set_desired(self, status: str, description: str, index: int, now: float, migrate: bool | None) -> None:
        self.desired_status, self.desired_description, self.migrate = status, description, migrate
        self.modify_index = self.alloc_modify_index = index
        self.modify_time = now

    def _task_event(self, task: str, kind: str, message: str, now: float, code: int = 0,
                    details: dict[str, str] | None = None) -> None:
        events = self.task_events.setdefault(task, [])
        if details is None:
            details = _exit_details(code, 0) if kind == "Terminated" else {}
        # `SetFailsTask` is called for `Not Restarting` only (task_runner.go `shouldRestart`, v2.0.5)
        events.append({"Type": kind, "Time": _ns(now), "DisplayMessage": message, "Message": "",
                       "ExitCode": code, "Details": details, "FailsTask": kind == "Not Restarting"})
        del events[:-10]  # the last 10 events are kept (reference section 3)

    # -- JSON --------------------------------------------------------------------------------------

    def task_states(self) -> JSON:
        state = {ClientStatus.PENDING: "pending", ClientStatus.RUNNING: "running"}.get(self.client_status, "dead")
        if self.client_status in (ClientStatus.LOST, ClientStatus.UNKNOWN):
            state = "running" if self.started_at is not None else "pending"
        return {
            task.name: {
                "State": state,
                "Failed": self.client_status is ClientStatus.FAILED,
                "Restarts": self.restarts,
                "LastRestart": _rfc3339(self.last_restart),
                "StartedAt": _rfc3339(self.started_at),
                "FinishedAt": _rfc3339(self.finished_at if state == "dead" else None),
                "Events": list(self.task_events.get(task.name, [])),
                "TaskHandle": None,
            }
            for task in self.tasks
        }

    def allocated_resources(self) -> JSON:
        """`AllocatedResources`: the only place allocated device IDs appear (reference section 3)."""
        tasks = {}
        for task in self.tasks:
            devices = [
                {"Vendor": c.group.vendor, "Type": c.group.type, "Name": c.group.name, "DeviceIDs": list(c.ids)}
                for c in self.devices if c.task == task.name
            ]
            tasks[task.name] = {
                "Cpu": {"CpuShares": task.cpu, "ReservedCores": None},
                "Memory": {"MemoryMB": task.memory_mb, "MemoryMaxMB": task.memory_max_mb},
                "Networks": None,
                "Devices": devices or None,
            }
        networks, ports = port_json.shared_json(self.ports, self.network, self.node_address)
        return {
            "Tasks": tasks,
            "TaskLifecycles": {task.name: None for task in self.tasks},
            "Shared": {"DiskMB": 300, "Networks": networks, "Ports": ports},
        }

    def _common(self) -> JSON:
        return {
            "ID": self.id,
            "Namespace": self.namespace,
            "EvalID": self.eval_id,
            "Name": self.name,
            "NodeID": self.node_id,
            "NodeName": self.node_name,
            "JobID": self.job_id,
            "TaskGroup": self.task_group,
            "DesiredStatus": self.desired_status,
            "DesiredDescription": self.desired_description,
            "DesiredTransition": {"Migrate": self.migrate, "Reschedule": None, "ForceReschedule": None,
                                  "NoShutdownDelay": None, "MigrateDisablePlacement": self.disable_placement},
            "ClientStatus": self.client_status.value,
            # `clientAlloc` (alloc_runner.go v2.0.3): the max_run_duration reason replaces the computed one
            "ClientDescription": ("allocation exceeded max_run_duration" if self.max_run_exceeded
                                  else _DESCRIPTIONS[self.client_status]),
            "TaskStates": self.task_states(),
            "DeploymentStatus": None,
            "FollowupEvalID": "",
            "NextAllocation": self.next_allocation,
            "RescheduleTracker": None,
            "PreemptedAllocations": self.preempted_allocations,
            "PreemptedByAllocation": self.preempted_by,
            "CreateIndex": self.create_index,
            "ModifyIndex": self.modify_index,
            "CreateTime": _ns(self.created_at),
            "ModifyTime": _ns(self.modify_time),
        }

    def to_json(self, *, with_job: bool) -> JSON:
        """The full allocation; event payloads use `with_job=False` (`Job: null`)."""
        full = self._common()
        full.update({
            "Job": self.job if with_job else None,
            "AllocatedResources": self.allocated_resources(),
            "Resources": {"CPU": sum(t.cpu for t in self.tasks), "MemoryMB": sum(t.memory_mb for t in self.tasks),
                          "DiskMB": 300},
            "Metrics": {"NodesEvaluated": 1, "NodesFiltered": 0, "NodesAvailable": None,
                        "ConstraintFiltered": None, "NodesExhausted": 0, "DimensionExhausted": None,
                        "CoalescedFailures": 0},
            "DeploymentID": "",
            "PreviousAllocation": self.previous_allocation,
            "NetworkStatus": None,
            "AllocModifyIndex": self.alloc_modify_index,
        })
        return full

    def to_stub(self, *, resources: bool = False, task_states: bool = True) -> JSON:
        """`AllocListStub`: no Job, no resources unless asked; adds JobType and JobVersion."""
        stub = self._common()
        stub["JobType"] = self.job_type
        stub["JobVersion"] = self.job_version
        if resources:
            stub["AllocatedResources"] = self.allocated_resources()
        if not task_states:
            stub["TaskStates"] = None
        return stub

    def event(self, kind: str, index: int) -> Event:
        """An Allocation-topic event; FilterKeys are [JobID, DeploymentID] (reference section 1)."""
        payload: JSON = {"Allocation": self.to_json(with_job=False)}
        if self.max_run_exceeded and self.client_status is ClientStatus.COMPLETE:
            # `AllocationEvent.Timeout`/`TimeoutReason`, both omitempty (nomad/state/events.go, v2.0.5)
            payload.update(Timeout=True, TimeoutReason=payload["Allocation"]["ClientDescription"])
        return Event("Allocation", kind, self.id, self.namespace, (self.job_id, ""), index, payload)

    def audit(self) -> JSON:
        return {
            "alloc_id": self.id,
            "job_id": self.job_id,
            "namespace": self.namespace,
            "task_group": self.task_group,
            "name": self.name,
            "node_id": self.node_id,
            "device_ids": self.device_ids,
            "share_gpu": self.share_gpu,
            "share_milli": self.share_milli,
            "registered_at": self.registered_at,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.task_ended_at,  # client truth: when the task really stopped on its node
            "terminal_event_at": self.terminal_event_at,
            "client_status": self.client_status.value,
            "desired_status": self.desired_status,
            "max_run_exceeded": self.max_run_exceeded,
            "kill_signals": dict(self.kill_signals),
            "ports": {port.label: port.value for port in self.ports},
            "server_finished_at": self.finished_at,  # when the servers last called it terminal
            "lost_at": self.lost_at,
            "task_running": self.started_at is not None and self.task_ended_at is None,
            "stopped_by_client": self.stopped_by_client,
        }
