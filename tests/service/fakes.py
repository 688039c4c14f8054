"""Fakes for driving the scheduler service deterministically: a Nomad that keeps jobs as Nomad does
(create-only registers refused when the job exists, deregister of a missing job a no-op 200), a
manual executor, and a clock. Each scenario runs in one thread, in milliseconds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, Node
from nomad_gpu.nomad.client import NomadError, NomadJobExists, NomadUnavailable
from nomad_gpu.nomad.decode import AllocInfo, AllocStatus
from nomad_gpu.render import JobSpec, RenderPlacement
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.life.actuator import JobState
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import QueueEntry, SqliteStore


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ManualExecutor:
    """Work handed to the pool waits here until the test runs it (in order, or one at a time)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> None:
        self.tasks.append((fn, args))

    def run_all(self) -> int:
        n = 0
        while self.tasks:
            fn, args = self.tasks.pop(0)
            fn(*args)
            n += 1
        return n


@dataclass
class FakeJob:
    job_id: str
    meta: dict[str, str]
    node: str
    devices: tuple[str, ...]
    stopped: bool = False


@dataclass
class FakeNomad:
    """The actuator's view of Nomad. `fail` makes the next calls raise; `lose_reply` applies a register
    and then raises as a lost reply does; `during_submit` runs inside a register (a click meanwhile)."""

    jobs: dict[str, FakeJob] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: NomadError | None = None
    lose_reply: int = 0
    during_submit: Callable[[], None] | None = None

    def submit(self, entry: QueueEntry, spec: JobSpec, placement: RenderPlacement) -> str:
        self.calls.append(("register", entry.nomad_job_id))
        if self.during_submit is not None:
            hook, self.during_submit = self.during_submit, None
            hook()
        if self.fail is not None:
            raise self.fail
        meta = {"nomad_gpu_entry": entry.id, "nomad_gpu_attempt": str(entry.attempts)}
        found = self.jobs.get(entry.nomad_job_id)
        if found is not None and not found.stopped:
            if found.meta != meta:
                raise NomadJobExists("register: the job already exists")
            return "hcl"  # the actuator takes its own job as registered
        group = placement.groups[0]
        self.jobs[entry.nomad_job_id] = FakeJob(entry.nomad_job_id, meta, placement.node_id,
                                                tuple(group.device_ids))  # placed at once, still pending
        if self.lose_reply:
            self.lose_reply -= 1
            raise NomadUnavailable("register: cannot reach Nomad (ReadTimeout)")
        return "hcl"

    def stop(self, job_id: str, namespace: str = "default") -> None:
        self.calls.append(("stop", job_id))
        if self.fail is not None:
            raise self.fail
        if job_id in self.jobs:
            self.jobs[job_id].stopped = True

    def ping(self) -> None:
        self.calls.append(("ping", ""))
        if self.fail is not None:
            raise self.fail

    def job_state(self, job_id: str, namespace: str = "default") -> JobState | None:
        self.calls.append(("read", job_id))
        if self.fail is not None:
            raise self.fail
        job = self.jobs.get(job_id)
        if job is None:
            return None
        # Nomad keeps the allocation until its client reports the kill: desired stop, not yet terminal
        placed = alloc(job_id, "pending", node=job.node, devices=job.devices, desired="stop" if job.stopped else "run")
        return JobState(status="dead" if job.stopped else "running", stopped=job.stopped, meta=job.meta,
                        allocs=(placed,))

    def registers(self) -> list[str]:
        return [j for c, j in self.calls if c == "register"]


def gpu_node(name: str, n: int) -> Node:
    gpus = tuple(Gpu(InstanceId(f"GPU-{name}-{k}"), "NVIDIA A100-SXM4-80GB", 81_920) for k in range(n))
    return Node(NodeId(name), name=name, cpu_mhz=64_000, memory_mb=512_000, gpus=gpus)


def alloc(job_id: str, status: str = "running", *, node: str = "n1", devices: tuple[str, ...] = ("GPU-n1-0",),
          desired: str = "run", index: int = 10, alloc_id: str | None = None, migrate: bool = False,
          next_alloc: str = "") -> AllocInfo:
    return AllocInfo(id=alloc_id or f"a-{job_id}", job_id=job_id, task_group="main", node_id=NodeId(node),
                     client_status=AllocStatus(status), desired_status=desired,
                     device_ids=tuple(InstanceId(d) for d in devices), device_name="nvidia/gpu/NVIDIA A100",
                     cpu_mhz=1000, memory_mb=1024, modify_index=index, migrate=migrate, next_allocation=next_alloc)


def spec(name: str, *, retries: int = 0, gpus: int = 1) -> dict[str, Any]:
    return {"name": name, "team": "t", "retries": retries, "task": {"image": "busybox"},
            "resources": {"cpu": 1000, "memory": 1024}, "gpu": {"count": gpus}}


def service(store: SqliteStore, nomad: FakeNomad, clock: Clock, executor: ManualExecutor) -> SchedulerService:
    return SchedulerService(store, nomad, SchedulingSettings(tick_s=0.01), clock=clock, executor=executor)
