"""The job spec a user writes: pydantic models that validate it with located errors.

A spec is short YAML (see ``jobspecs/``): what to run, for which team, and what
GPU capacity each group needs, in one of three shapes that map onto DESIGN 3.4:
``gpu`` (whole devices), ``mig`` (MIG instances of one profile) or ``share``
(milli-GPU of one time-sliced GPU). This module is the top level: the job and
the sweep, and the rules that span their groups; a group is
:mod:`nomad_gpu.render.groupspec`, the ``sweep:`` section
:mod:`nomad_gpu.render.sweepconfig`, the field types they share
:mod:`nomad_gpu.render.specfields`. These models only describe and validate;
turning them into HCL is :mod:`nomad_gpu.render.jobs`, reading YAML with line
numbers is :mod:`nomad_gpu.render.loading`, sweeps expand in
:mod:`nomad_gpu.render.sweep`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.jobmeta import META_SWEEP, META_TRIAL, META_USER, SWEEP_CLASS
from nomad_gpu.render.checkpoint import CheckpointSpec
from nomad_gpu.render.devspec import DevSpec
from nomad_gpu.render.durations import Seconds
from nomad_gpu.render.groupspec import GroupSpec
from nomad_gpu.render.specfields import (
    Label,
    MetaKey,
    Name,
    NonEmptyText,
    SpecModel,
    StrictInt,
    Text,
    WorkloadClass,
    matching,
)
from nomad_gpu.render.speckinds import added_fields
from nomad_gpu.render.sweepconfig import SweepConfig

__all__ = [
    "CLASSES",
    "META_SWEEP",
    "META_USER",
    "META_TRIAL",
    "META_TRIAL_PREFIX",
    "RESERVED_META_PREFIX",
    "SHORTHAND_GROUP",
    "DevSpec",
    "JobSpec",
    "SpecError",
    "SweepSpec",
]

RESERVED_META_PREFIX = "nomad_gpu_"
"""Meta keys with this prefix are written by nomad-gpu, never by a user spec."""
SHORTHAND_GROUP = "main"
"""The group a top-level ``task:`` becomes."""
GROUP_FIELDS = ("count", "task", "resources", "gpu", "mig", "share", "gpu_memory", "ports", "service")
"""Group fields that may sit at the top level together with ``task:``."""
REACH_FIELDS = ("ports", "service")
"""Group fields that may also sit at the top level of a one-group ``groups:`` spec (DESIGN 19)."""
CLASSES = ("serving", "training", "hpo", "exploratory", "interactive")
"""Workload classes (DESIGN 14): the user states intent, the service chooses whole GPU, MIG or share."""
META_TRIAL_PREFIX = "nomad_gpu_trial_"
"""Job meta prefix of a sweep trial: one key per parameter, ``nomad_gpu_trial_<param>``."""


class SpecError(InvalidRequest):
    """A job spec is invalid. ``str()`` is one line; ``errors`` lists every problem.

    An ``InvalidRequest`` of the project's tree (so also a ``ValueError``)."""

    def __init__(self, message: str, *, errors: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.errors: tuple[str, ...] = errors or (message,)


def _reach_into_group(data: dict[str, Any]) -> dict[str, Any]:
    """Top-level ``ports``/``service`` with ``groups:``: only for one group that gives none of its own
    (every group of a job runs on one node, so one set of ports cannot serve several)."""
    given = [key for key in REACH_FIELDS if key in data]
    if not given:
        return data
    groups = data.get("groups")
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
        raise ValueError(f"top-level {' and '.join(given)} apply to a job of one group; with several groups, "
                         "give each group its own")
    clash = [key for key in given if key in groups[0]]
    if clash:
        raise ValueError(f"{clash[0]} is given both at the top level and in the one group: give it once")
    data = dict(data)
    data["groups"] = [{**groups[0], **{key: data.pop(key) for key in given}}]
    return data


class _SpecBase(SpecModel):
    name: Name
    team: Label = "default"
    priority: Annotated[StrictInt, Field(ge=1, le=100)] = 50
    datacenters: Annotated[list[NonEmptyText], Field(min_length=1)] = Field(default_factory=lambda: ["*"])
    namespace: Label = "default"
    node_pool: Label | None = None
    template: Annotated[
        str, Field(strict=True), matching(r"[a-z0-9][a-z0-9_-]{0,63}", "a template name like 'batch'", 64)
    ] = "batch"
    retries: Annotated[StrictInt, Field(ge=0, le=100)] = 0
    meta: dict[MetaKey, Text] = Field(default_factory=dict)
    groups: Annotated[list[GroupSpec], Field(min_length=1)]
    dev: DevSpec | None = None
    runtime: Seconds | None = None
    """An estimate of how long the job runs, for the queue's ETA (never enforced). Without it the ETA
    assumes the operator's default for the job's class or template, and says it is an estimate."""
    max_runtime: Seconds | None = None
    """A wall-time limit: past it the service stops the job and the entry fails with reason `timeout`."""
    workload_class: WorkloadClass | None = Field(default=None, alias="class")
    """The job's workload class; a group's own `class` overrides it. A sweep's trials default to `hpo`."""
    after: Annotated[
        list[Annotated[str, Field(strict=True), matching(r"[a-z0-9][a-z0-9-]{0,63}", "an entry or sweep ID", 64)]],
        Field(max_length=64),
    ] = Field(default_factory=list)
    """Entry or sweep IDs of the same team: start only after every one of them completed successfully; if
    one fails or is cancelled, this ends `dependency-failed` without running."""
    allow_unschedulable: Annotated[bool, Field(strict=True)] = False
    """Queue it even if no node of the fleet (in its pool and datacenters) could ever run it: for a fleet
    about to grow. Without it such a submission is refused with the nearest thing the fleet offers."""
    preemptible: Annotated[bool | None, Field(strict=True)] = None
    """Whether a waiting job may take its GPUs back (docs/classes.md); unset: its class's policy decides."""
    checkpoint: CheckpointSpec | None = None
    """The signal and grace its task gets to save its state when stopped; unset: Nomad's SIGINT, then 5 s."""

    @model_validator(mode="before")
    @classmethod
    def _task_shorthand(cls, data: Any) -> Any:
        """``task:`` (and count/resources/gpu/mig/share/ports/service) at the top level = one group "main";
        ``ports:``/``service:`` at the top level of a one-group ``groups:`` spec belong to that group."""
        if not isinstance(data, dict):
            return data
        if "task" not in data:
            return _reach_into_group(data)
        if "groups" in data:
            raise ValueError("use either a top-level 'task' (one group) or 'groups', not both")
        data = dict(data)
        group = {"name": SHORTHAND_GROUP}
        group.update({key: data.pop(key) for key in GROUP_FIELDS + added_fields() if key in data})
        data["groups"] = [group]
        return data

    @field_validator("meta")
    @classmethod
    def _no_reserved_meta(cls, meta: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """``nomad_gpu_*`` keys are ours. Only a sweep trial carries some, written by expand_sweep.

        A trial keeps its sweep meta so that a stored trial (``model_dump``) re-parses; it
        must then be consistent: named ``<nomad_gpu_sweep>-t<nomad_gpu_trial>``.
        """
        reserved = [key for key in meta if key.startswith(RESERVED_META_PREFIX) and key != META_USER]
        if not reserved:
            return meta
        rule = f"keys starting with {RESERVED_META_PREFIX!r} are reserved"
        for key in reserved:
            if key not in (META_SWEEP, META_TRIAL) and not key.startswith(META_TRIAL_PREFIX):
                raise ValueError(f"key {key!r}: {rule}")
        sweep, trial, name = meta.get(META_SWEEP), meta.get(META_TRIAL), info.data.get("name")
        if sweep is None or trial is None or (name is not None and name != f"{sweep}-t{trial}"):
            raise ValueError(f"key {reserved[0]!r}: {rule} (sweep trials get theirs from expand_sweep)")
        return meta

    @field_validator("groups")
    @classmethod
    def _unique_group_names(cls, groups: list[GroupSpec]) -> list[GroupSpec]:
        seen: set[str] = set()
        for group in groups:
            if group.name in seen:
                raise ValueError(f"group name {group.name!r} is used twice")
            seen.add(group.name)
        return groups

    @model_validator(mode="after")
    def _static_ports_once_per_node(self) -> _SpecBase:
        """Every allocation of a job runs on its one node, where a static port can be held only once
        (Nomad would place the first and refuse the rest: "reserved port collision")."""
        seen: dict[int, str] = {}
        for group in self.groups:
            for label, port in group.ports.items():
                if port.static is None:
                    continue
                if group.count > 1:
                    raise ValueError(f"groups[{group.name}]: static port {port.static} ({label}) with count "
                                     f"{group.count}: every allocation of a job runs on one node, where the port "
                                     "is free only once; use a dynamic port (leave out static)")
                if port.static in seen:
                    raise ValueError(f"groups[{group.name}]: static port {port.static} is also in "
                                     f"groups[{seen[port.static]}]: every group of a job runs on one node")
                seen[port.static] = group.name
        return self

    @model_validator(mode="after")
    def _sized_groups_have_a_class(self) -> _SpecBase:
        for group in self.groups:
            if group.gpu_memory is not None and group.capacity_kind is None and self.class_of(group) is None:
                raise ValueError(f"groups[{group.name}]: gpu_memory needs a class ({', '.join(CLASSES)}) "
                                 "to choose whole GPU, MIG or share; or give gpu: with it")
        return self

    @property
    def is_gang(self) -> bool:
        """More than one group: all groups are admitted together or not at all."""
        return len(self.groups) > 1

    @property
    def is_sweep(self) -> bool:
        """A sweep, or one of its trials (which carry the sweep's meta)."""
        return getattr(self, "kind", None) == "sweep" or META_SWEEP in self.meta

    def class_of(self, group: GroupSpec) -> WorkloadClass | None:
        """The group's class: its own, else the job's, else `hpo` for a sweep's trials, else None."""
        if group.workload_class is not None:
            return group.workload_class
        if self.workload_class is not None:
            return self.workload_class
        return SWEEP_CLASS if self.is_sweep else None

    def chooses_kind(self, group: GroupSpec) -> bool:
        """Whether the service chooses the group's kind from its class: no gpu/mig/share given, and a size
        (`gpu_memory`) or a class the spec names itself. A sweep's implicit `hpo` sizes no CPU-only group."""
        if group.capacity_kind is not None:
            return False
        return group.gpu_memory is not None or group.workload_class is not None or self.workload_class is not None


class JobSpec(_SpecBase):
    """One job: one or more groups admitted together (a gang)."""

    kind: Literal["job"] = "job"


class SweepSpec(_SpecBase):
    """A job spec run once per parameter combination (one queue entry per trial)."""

    kind: Literal["sweep"]
    sweep: SweepConfig

    @model_validator(mode="after")
    def _trials_are_nameable(self) -> SweepSpec:
        last = f"{self.name}-t{self.sweep.trial_count - 1}"
        if len(last) > 48:
            raise ValueError(
                f"name {self.name!r} is too long for {self.sweep.trial_count} trials: "
                f"trial names like {last!r} must be at most 48 characters"
            )
        for group in self.groups:
            for param in self.sweep.parameters:
                key = f"TRIAL_{param.upper()}"
                if key in group.task.env:
                    raise ValueError(f"groups[{group.name}].task.env.{key} conflicts with sweep parameter {param!r}")
        return self
