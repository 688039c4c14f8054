"""Job JSON as the dev cluster understands it: defaults, validation, and typed views for placement.

Registered jobs arrive as raw Nomad Job JSON (from `/v1/jobs/parse` or built by hand). This module
fills Nomad's defaults (what `Canonicalize` does in the Go API client), rejects what Nomad would
reject with the status codes of reference section 6 (400 for a missing job or ID, 500 text for
validation errors), and reads the few things the dev cluster acts on into frozen values, so the
placement and runner code never touch raw JSON:

- resources, constraints and device requests per task group (reference section 7);
- the dev-only meta keys below (job < group < task, the most specific wins).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

from . import disconnect, ports, services
from .events import Event
from .hclservices import canonicalize_group, service_errors
from .ports import NetworkAsk
from .restarts import RestartPolicy

logger = logging.getLogger(__name__)

JSON = dict[str, Any]

META_DURATION = "nomad_gpu_dev_duration_s"
META_EXIT = "nomad_gpu_dev_exit"
META_SHARE_MILLI = "nomad_gpu_share_milli"
DEFAULT_DURATION_S = 1.0

_SECOND = 10**9
_HOUR = 3600 * _SECOND
_RESTART = {
    "batch": {"Attempts": 3, "Interval": 24 * _HOUR, "Delay": 15 * _SECOND, "Mode": "fail"},
    "service": {"Attempts": 2, "Interval": 1800 * _SECOND, "Delay": 15 * _SECOND, "Mode": "fail"},
}
_RESCHEDULE = {
    "batch": {"Attempts": 1, "Interval": 24 * _HOUR, "Delay": 5 * _SECOND, "DelayFunction": "constant",
              "MaxDelay": 0, "Unlimited": False},
    "service": {"Attempts": 0, "Interval": 0, "Delay": 30 * _SECOND, "DelayFunction": "exponential",
                "MaxDelay": _HOUR, "Unlimited": True},
}
SUPPORTED_TYPES = ("batch", "service", "system", "sysbatch")
SYSTEM_TYPES = ("system", "sysbatch")  # one allocation per eligible node (systemjobs.py)


class JobRequestError(ValueError):
    """A register request Nomad answers with 400 (`Job must be specified`, ...)."""


class JobValidationError(ValueError):
    """A jobspec Nomad answers with 500 text (reference section 6: validation errors are 500)."""


@dataclass(frozen=True)
class Constraint:
    ltarget: str
    rtarget: str
    operand: str


@dataclass(frozen=True)
class Affinity:
    ltarget: str
    rtarget: str
    operand: str
    weight: int


@dataclass(frozen=True)
class DeviceAsk:
    """One task `device` block: `count` instances of `name`, from ONE group (reference section 7)."""

    name: str
    count: int
    constraints: tuple[Constraint, ...]
    affinities: tuple[Affinity, ...]


@dataclass(frozen=True)
class TaskAsk:
    name: str
    driver: str
    cpu: int
    memory_mb: int
    memory_max_mb: int
    devices: tuple[DeviceAsk, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class GroupAsk:
    """Everything placement and the runner need to know about one task group of one job version."""

    namespace: str
    job_id: str
    job_type: str
    group: str
    datacenters: tuple[str, ...]
    node_pool: str
    constraints: tuple[Constraint, ...]  # job, then group, then task constraints
    tasks: tuple[TaskAsk, ...]
    duration_s: float
    fails: bool
    share_milli: int | None
    reschedule_attempts: int
    reschedule_unlimited: bool
    job_constraints: int = 0  # how many of `constraints` are job-level (for distinct_hosts' scope)
    host_volumes: tuple[str, ...] = ()  # sources of the group's `volume` blocks of type host
    restart: RestartPolicy = RestartPolicy(0, 0.0, 0.0, "fail")  # the group's `restart` block (restarts.py)
    network: NetworkAsk | None = None  # the group's `network` ports (ports.py)

    @property
    def cpu(self) -> int:
        return sum(task.cpu for task in self.tasks)

    @property
    def memory_mb(self) -> int:
        return sum(task.memory_mb for task in self.tasks)

    def visible_devices(self) -> list[str]:
        """IDs the tasks name in NVIDIA_VISIBLE_DEVICES (how a time-slice share reaches a task)."""
        return [part.strip() for task in self.tasks for name, value in task.env
                if name == "NVIDIA_VISIBLE_DEVICES" for part in value.split(",") if part.strip()]


def canonicalize(job: JSON) -> JSON:
    """A copy of `job` with Nomad's defaults filled in (idempotent)."""
    job = copy_json(job)
    job_type = job.get("Type") or "service"
    job["Type"] = job_type
    job["Name"] = job.get("Name") or job.get("ID")
    job["Region"] = job.get("Region") or "global"
    job["Namespace"] = job.get("Namespace") or "default"
    job["Priority"] = job.get("Priority") or 50
    job["Datacenters"] = job.get("Datacenters") or ["*"]
    job["NodePool"] = job.get("NodePool") or "default"
    job["AllAtOnce"] = bool(job.get("AllAtOnce"))
    job["Stop"] = bool(job.get("Stop"))
    job["Constraints"] = _canonical_constraints(job.get("Constraints"))
    for group in job.get("TaskGroups") or []:
        group["Count"] = 1 if group.get("Count") is None else group["Count"]
        group["Constraints"] = _canonical_constraints(group.get("Constraints"))
        # a system job restarts as a service job, a sysbatch job as a batch job; neither is rescheduled
        # (`TaskGroup.Canonicalize`, api/tasks.go v2.0.5)
        restart = {"system": "service", "sysbatch": "batch"}.get(job_type, job_type)
        group["RestartPolicy"] = _merge_defaults(group.get("RestartPolicy"), _RESTART.get(restart, {}))
        if job_type not in SYSTEM_TYPES:
            group["ReschedulePolicy"] = _merge_defaults(group.get("ReschedulePolicy"), _RESCHEDULE.get(job_type, {}))
        group["EphemeralDisk"] = group.get("EphemeralDisk") or {"Sticky": False, "SizeMB": 300, "Migrate": False}
        disconnect.canonicalize(group)
        services.canonicalize(job, group)
        for task in group.get("Tasks") or []:
            task["KillTimeout"] = task.get("KillTimeout") or 5 * _SECOND
            resources = task.get("Resources") or {}
            resources["CPU"] = resources.get("CPU") or 100
            resources["MemoryMB"] = resources.get("MemoryMB") or 300
            resources["MemoryMaxMB"] = resources.get("MemoryMaxMB") or 0
            for device in resources.get("Devices") or []:
                device["Count"] = 1 if device.get("Count") is None else device["Count"]
                device["Constraints"] = _canonical_constraints(device.get("Constraints"))
            task["Resources"] = resources
        canonicalize_group(group)
    return job


def copy_json(value: Any) -> Any:
    """A deep copy of decoded JSON: `copy.deepcopy` costs 60 us on a one-task job, a quarter of a
    register; anything that is not JSON goes through deepcopy."""
    kind = type(value)
    if kind is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if kind is list:
        return [copy_json(item) for item in value]
    if kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def _merge_defaults(given: JSON | None, defaults: JSON) -> JSON:
    merged = dict(defaults)
    merged.update({key: value for key, value in (given or {}).items() if value is not None})
    return merged


def _canonical_constraints(raw: Any) -> list[JSON] | None:
    if not raw:
        return None
    return [{**c, "Operand": c.get("Operand") or "="} for c in raw]


def validate(job: JSON, admission: list[str] | None = None) -> None:
    """Raise JobValidationError (500 in Nomad) for a canonical job the dev cluster cannot run;
    `admission` are the errors of the validators that run first (register.admission_errors)."""
    errors: list[str] = list(admission or [])
    if job["Type"] not in SUPPORTED_TYPES:
        errors.append(f"Invalid job type {job['Type']!r}")
    if not isinstance(job["Priority"], int) or not 1 <= job["Priority"] <= 100:
        errors.append("Job priority must be between [1, 100]")
    if " " in job["ID"] or "\x00" in job["ID"]:
        errors.append("Job ID contains a space or null character")
    groups = job.get("TaskGroups") or []
    if not groups:
        errors.append("Missing job task groups")
    names = [group.get("Name") for group in groups]
    for group in groups:
        name = group.get("Name")
        prefix = f"Task group {name} validation failed"
        if not name:
            errors.append("Missing task group name")
        elif names.count(name) > 1:
            errors.append(f"Job task group {name} redefined")
        if not isinstance(group["Count"], int) or group["Count"] < 0:
            errors.append(f"{prefix}: Task group count can't be negative")
        elif job["Type"] in SYSTEM_TYPES and group["Count"] > 1:  # `Job.Validate`, nomad/structs/structs.go
            errors.append(f"Job task group {name} has count {group['Count']}. "
                          "Count cannot exceed 1 with system scheduler")
        errors.extend(ports.validate(group, prefix) + services.validate(group, prefix))
        tasks = group.get("Tasks") or []
        if not tasks:
            errors.append(f"{prefix}: Missing tasks for task group")
        errors += [f"{prefix}: {error}" for error in service_errors(group)]
        errors += disconnect.validate(job["Type"], group, prefix)
        for task in tasks:
            if not task.get("Name"):
                errors.append(f"{prefix}: Missing task name")
            if not task.get("Driver"):
                errors.append(f"{prefix}: Task {task.get('Name')} validation failed: Missing task driver")
            resources = task["Resources"]
            if resources["MemoryMB"] < 10:
                errors.append(f"{prefix}: Minimum MemoryMB value is 10; got {resources['MemoryMB']}")
            for device in resources.get("Devices") or []:
                if not device.get("Name") or device["Count"] < 1:
                    errors.append(f"{prefix}: device requests need a name and a positive count")
    if errors:
        listed = "".join(f"\t* {error}\n" for error in errors)
        raise JobValidationError(f"{len(errors)} error{'s' if len(errors) > 1 else ''} occurred:\n{listed}\n")


def group_asks(job: JSON) -> dict[str, GroupAsk]:
    """Typed views of every task group of a canonical job, keyed by group name."""
    return {group["Name"]: _group_ask(job, group) for group in job.get("TaskGroups") or []}


def _group_ask(job: JSON, group: JSON) -> GroupAsk:
    group_meta = {**(job.get("Meta") or {}), **(group.get("Meta") or {})}
    tasks = []
    durations, fails, shares = [], False, []
    for task in group.get("Tasks") or []:
        meta = {**group_meta, **(task.get("Meta") or {})}
        durations.append(_float_meta(meta, META_DURATION, DEFAULT_DURATION_S))
        fails = fails or str(meta.get(META_EXIT, "")).lower() == "fail"
        if META_SHARE_MILLI in meta:
            shares.append(_int_meta(meta, META_SHARE_MILLI))
        resources = task["Resources"]
        tasks.append(TaskAsk(
            name=task["Name"],
            driver=str(task.get("Driver") or ""),
            cpu=int(resources["CPU"]),
            memory_mb=int(resources["MemoryMB"]),
            memory_max_mb=int(resources.get("MemoryMaxMB") or 0),
            devices=tuple(
                DeviceAsk(device["Name"], int(device["Count"]), _constraints(device.get("Constraints")),
                          _affinities(device.get("Affinities")))
                for device in resources.get("Devices") or []
            ),
            env=tuple(sorted((str(k), str(v)) for k, v in (task.get("Env") or {}).items())),
        ))
    reschedule = group.get("ReschedulePolicy") or {}
    restart = group.get("RestartPolicy") or {}
    return GroupAsk(
        namespace=job["Namespace"],
        job_id=job["ID"],
        job_type=job["Type"],
        group=group["Name"],
        datacenters=tuple(job["Datacenters"]),
        node_pool=job["NodePool"],
        constraints=(_constraints(job.get("Constraints")) + _constraints(group.get("Constraints"))
                     + tuple(c for task in group.get("Tasks") or [] for c in _constraints(task.get("Constraints")))),
        tasks=tuple(tasks),
        duration_s=max(durations, default=DEFAULT_DURATION_S),
        fails=fails,
        share_milli=next((share for share in shares if share is not None), None),
        reschedule_attempts=int(reschedule.get("Attempts") or 0),
        reschedule_unlimited=bool(reschedule.get("Unlimited")),
        job_constraints=len(job.get("Constraints") or []),
        host_volumes=tuple(sorted(str(v.get("Source") or "") for v in (group.get("Volumes") or {}).values()
                                  if (v or {}).get("Type") == "host")),
        restart=RestartPolicy(int(restart.get("Attempts") or 0), int(restart.get("Interval") or 0) / _SECOND,
                              int(restart.get("Delay") or 0) / _SECOND, str(restart.get("Mode") or "fail")),
        network=ports.network_ask(group),
    )


def _constraints(raw: Any) -> tuple[Constraint, ...]:
    return tuple(Constraint(str(c.get("LTarget") or ""), str(c.get("RTarget") or ""),
                            str(c.get("Operand") or "=")) for c in raw or [])


def _affinities(raw: Any) -> tuple[Affinity, ...]:
    return tuple(Affinity(str(a.get("LTarget") or ""), str(a.get("RTarget") or ""),
                          str(a.get("Operand") or "="), int(a.get("Weight") or 0)) for a in raw or [])


def _float_meta(meta: dict[str, Any], key: str, default: float) -> float:
    try:
        value = float(meta.get(key, default))
    except (TypeError, ValueError):
        logger.warning("meta %s=%r is not a number; using %s", key, meta.get(key), default)
        return default
    return max(0.0, value)


def _int_meta(meta: dict[str, Any], key: str) -> int | None:
    try:
        return int(str(meta[key]).strip())
    except (TypeError, ValueError):
        logger.warning("meta %s=%r is not an integer; ignoring it", key, meta.get(key))
        return None


def stamp_version(job: JSON, previous: JSON | None, index: int, now: float) -> None:
    """Fill the read-back fields of a registered version (reference section 6); a re-register of
    the same job keeps its CreateIndex and bumps Version."""
    job.update({
        "Version": previous["Version"] + 1 if previous else 0,
        "SubmitTime": int(now * 1e9),  # Unix ns
        "CreateIndex": previous["CreateIndex"] if previous else index,
        "ModifyIndex": index,
        "JobModifyIndex": index,
        "Stop": False,
        "Stable": False,
        "ParentID": job.get("ParentID") or "",
        "Dispatched": False,
        "Status": "pending",
        "StatusDescription": "",
    })


def job_event(kind: str, job: JSON, index: int, *, deleted: bool = False) -> Event:
    """A Job-topic event; a purge adds `Deleted: true` (reference section 1, 1.11.3+)."""
    payload: JSON = {"Job": job}
    if deleted:
        payload["Deleted"] = True
    return Event("Job", kind, job["ID"], job["Namespace"], None, index, payload)


def job_stub(job: JSON, summary: JSON, *, with_meta: bool) -> JSON:
    """`GET /v1/jobs` entry (JobListStub, reference section 6); Meta only with `?meta=true`."""
    stub = {
        "ID": job["ID"],
        "ParentID": job.get("ParentID") or "",
        "Name": job["Name"],
        "Namespace": job["Namespace"],
        "Datacenters": job["Datacenters"],
        "NodePool": job["NodePool"],
        "Type": job["Type"],
        "Priority": job["Priority"],
        "Periodic": False,
        "ParameterizedJob": False,
        "Stop": job["Stop"],
        "Status": job["Status"],
        "StatusDescription": "",
        "JobSummary": summary,
        "CreateIndex": job["CreateIndex"],
        "ModifyIndex": job["ModifyIndex"],
        "JobModifyIndex": job["JobModifyIndex"],
        "SubmitTime": job["SubmitTime"],
    }
    if with_meta:
        stub["Meta"] = job.get("Meta")
    return stub
