"""The job spec a user writes: pydantic models that validate it with located errors.

A spec is short YAML (see ``jobspecs/``): what to run, for which team, and what
GPU capacity each group needs, in one of three shapes that map onto DESIGN 3.4:
``gpu`` (whole devices), ``mig`` (MIG instances of one profile) or ``share``
(milli-GPU of one time-sliced GPU). These models only describe and validate;
turning them into HCL is :mod:`nomad_gpu.render.jobs`, reading YAML with line
numbers is :mod:`nomad_gpu.render.loading`, sweeps expand in
:mod:`nomad_gpu.render.sweep`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.jobmeta import META_SWEEP, META_TRIAL, META_USER, SWEEP_CLASS
from nomad_gpu.render.gpumemory import UNITS, gpu_memory_bytes, mib_covering
from nomad_gpu.render.network import Ports, ServiceSpec, check_service_port
from nomad_gpu.render.speckinds import added_fields, builtin_spec_kinds, spec_kind, spec_kinds, validate_added
from nomad_gpu.render.textrules import TextRule, capped, shown

__all__ = [
    "CLASSES",
    "MAX_TRIALS",
    "MAX_TRIALS_CONTEXT",
    "META_SWEEP",
    "META_USER",
    "META_TRIAL",
    "META_TRIAL_PREFIX",
    "RESERVED_META_PREFIX",
    "SHORTHAND_GROUP",
    "DevSpec",
    "GpuSpec",
    "GroupSpec",
    "JobSpec",
    "MigSpec",
    "ResourcesSpec",
    "ShareSpec",
    "SpecError",
    "SweepConfig",
    "SweepRange",
    "SweepSpec",
    "SweepValue",
    "RANGE_TAG",
    "TRIALS_CEILING",
    "TaskSpec",
    "VALUES_TAG",
    "WorkloadClass",
]

RESERVED_META_PREFIX = "nomad_gpu_"
"""Meta keys with this prefix are written by nomad-gpu, never by a user spec."""
MAX_ENV_ENTRIES = 1000
"""Env variables (and command-line arguments) of one task at most: a task needs tens, and each entry held
for a queued spec costs the service memory (60,000 of them made one entry cost 15 MB)."""
RESERVED_ENV = frozenset({"NVIDIA_VISIBLE_DEVICES"})
"""Env a user may not set: nomad-gpu (or the device plugin) decides which GPUs a task sees."""
SHORTHAND_GROUP = "main"
"""The group a top-level ``task:`` becomes."""
GROUP_FIELDS = ("count", "task", "resources", "gpu", "mig", "share", "gpu_memory", "ports", "service")
"""Group fields that may sit at the top level together with ``task:``."""
REACH_FIELDS = ("ports", "service")
"""Group fields that may also sit at the top level of a one-group ``groups:`` spec (DESIGN 19)."""
CLASSES = ("serving", "training", "hpo", "exploratory", "interactive")
"""Workload classes (DESIGN 14): the user states intent, the service chooses whole GPU, MIG or share."""
MAX_TRIALS = 10_000
"""The service's default cap on the trials of one sweep (``max_trials`` in its config)."""
TRIALS_CEILING = 100_000
"""The most trials any sweep may expand to, whatever is configured: the bound when no cap is given."""
MAX_TRIALS_CONTEXT = "max_trials"
"""Validation context key that carries the cap (``model_validate(..., context={...})``)."""
META_TRIAL_PREFIX = "nomad_gpu_trial_"
"""Job meta prefix of a sweep trial: one key per parameter, ``nomad_gpu_trial_<param>``."""


class SpecError(InvalidRequest):
    """A job spec is invalid. ``str()`` is one line; ``errors`` lists every problem.

    An ``InvalidRequest`` of the project's tree (so also a ``ValueError``)."""

    def __init__(self, message: str, *, errors: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.errors: tuple[str, ...] = errors or (message,)


def _matching(pattern: str, what: str, cap: int) -> AfterValidator:
    """The text must match ``pattern``, checked only within ``cap`` characters (:mod:`textrules`)."""
    return AfterValidator(TextRule(pattern, what, cap).check)


def _scalar_text(value: object) -> object:
    """YAML turns ``EPOCHS: 10`` into an int; accept numbers as text, refuse booleans."""
    if isinstance(value, bool):
        raise ValueError("must be a string (quote true/false/yes/no in YAML)")
    if isinstance(value, int | float):
        return str(value)
    return value


def _valid_unicode(value: str) -> str:
    if any(0xD800 <= ord(char) <= 0xDFFF for char in value):
        raise ValueError("must be valid Unicode text (contains a lone surrogate)")
    if "\x00" in value:  # a task's env and arguments are C strings (execve): a NUL cannot reach it
        raise ValueError("must not contain a NUL character")
    return value


def _sweep_value(value: object) -> str | int | float | bool:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if isinstance(value, str):
        return _valid_unicode(value)
    if isinstance(value, bool | int | float):
        return value
    raise ValueError("must be a string, number or boolean")


Text = Annotated[str, BeforeValidator(_scalar_text), Field(strict=True), AfterValidator(_valid_unicode)]
"""Free text a user controls: escaped on its way into HCL, so any character is fine."""
NonEmptyText = Annotated[Text, Field(min_length=1)]
StrictInt = Annotated[int, Field(strict=True)]
MODEL_NAME_CAP = 256
"""Characters of a GPU model name at most: the fleet check reads it with patterns (`NVIDIA H100 80GB HBM3` is 21)."""
ModelName = Annotated[NonEmptyText, AfterValidator(lambda name: capped(name, MODEL_NAME_CAP))]
Name = Annotated[str, Field(strict=True), _matching(r"[a-z0-9-]{1,48}", "1-48 characters of a-z, 0-9, '-'", 48)]
Label = Annotated[
    str,
    Field(strict=True),
    _matching(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", "1-64 characters of A-Z, a-z, 0-9, '_', '.', '-'", 64),
]
EnvKey = Annotated[
    str, Field(strict=True), _matching(r"[A-Za-z_][A-Za-z0-9_]{0,127}", "an environment variable name", 128)
]
MetaKey = Annotated[
    str,
    Field(strict=True),
    _matching(r"[A-Za-z_][A-Za-z0-9_-]{0,127}", "a meta key ([A-Za-z_][A-Za-z0-9_-]*)", 128),
]
DURATION_CAP = 64
"""Characters of a duration at most (`1d2h30m15s` needs 10)."""
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhd] *)+")
"""Parts like `1h`, spaces only after a unit: each character has one place in it, so no backtracking
tries another split (searching the text for parts from every position was quadratic in a run of digits)."""
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(value: Any) -> float:
    """A duration: seconds as a number, or text like `90s`, `30m`, `4h`, `1d`, `1h30m`."""
    if isinstance(value, bool):
        raise ValueError("must be a duration like 30m or 4h, or a number of seconds")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = capped(value, DURATION_CAP).strip().lower()
        if _NUMBER.fullmatch(text):
            return float(text)
        if _DURATION.fullmatch(text):  # then the parts tile it: one pass reads them
            return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))
    raise ValueError("must be a duration like 30m or 4h, or a number of seconds")


Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0, le=366 * 86400, allow_inf_nan=False)]
"""A positive duration, stored in seconds."""
SweepValue = Annotated[str | int | float | bool, PlainValidator(_sweep_value)]
"""One value of a sweep parameter, as written in YAML."""


class _Model(BaseModel):
    # `class` is a Python keyword: the field is `workload_class`, read and written as `class`, so a stored
    # spec (model_dump) says `class:` like the one the user wrote.
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True, validate_by_name=True,
                              validate_by_alias=True)


def _gpu_memory(value: object) -> object:
    """Checked here, kept as written (a stored spec re-parses to the same need); read by `gpu_memory_bytes`."""
    gpu_memory_bytes(value)
    return value


WorkloadClass = Literal["serving", "training", "hpo", "exploratory", "interactive"]
GpuMemory = Annotated[int | float | str, PlainValidator(_gpu_memory)]
"""GiB as a number, or text with a unit (`"14GiB"`, `"15GB"`, `"14336MiB"`)."""


class TaskSpec(_Model):
    """What runs: driver, image, command line and environment."""

    driver: Annotated[str, Field(strict=True), _matching(r"[a-z0-9_-]{1,64}", "a Nomad driver name", 64)] = "docker"
    image: NonEmptyText | None = Field(default=None, validate_default=True)
    command: NonEmptyText | None = None
    args: list[Text] = Field(default_factory=list, max_length=MAX_ENV_ENTRIES)
    env: dict[EnvKey, Text] = Field(default_factory=dict, max_length=MAX_ENV_ENTRIES)

    @field_validator("image")
    @classmethod
    def _image_for_docker(cls, image: str | None, info: ValidationInfo) -> str | None:
        if image is None and info.data.get("driver") == "docker":
            raise ValueError("required for the docker driver")
        return image

    @field_validator("env")
    @classmethod
    def _no_reserved_env(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by nomad-gpu from the GPUs it assigns")
        return env


_SIZE = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,12})?) ?([A-Za-z]{1,3})")


def _mib(value: object) -> object:
    """`memory: 16GB` is refused with the number to write: Nomad's `resources.memory` is a whole number of
    MiB, and a bare number here is MiB where `gpu_memory`'s is GiB, so text with a unit is not guessed at."""
    if not isinstance(value, str):
        return value
    match = _SIZE.fullmatch(capped(value, DURATION_CAP).strip())
    if match is None or match.group(2) not in UNITS:
        raise ValueError(f"must be a whole number of MiB, got {shown(value)}")
    number, unit = match.groups()
    try:
        mib = mib_covering(gpu_memory_bytes(number + unit))
        binary = f"{number}{unit[0].upper()}iB"
        also = "" if unit.endswith("iB") else f" ({mib_covering(gpu_memory_bytes(binary))} for {binary})"
    except ValueError:  # 0 or more than gpu_memory takes: no number to suggest
        raise ValueError(f"must be a whole number of MiB, got {shown(value)}") from None
    raise ValueError(f"memory is in MiB: write {mib} for {shown(value)}{also}")


Mib = Annotated[StrictInt, BeforeValidator(_mib), Field(ge=1)]
"""A whole number of MiB, as Nomad's `resources.memory` takes it."""


class ResourcesSpec(_Model):
    """CPU (MHz) and memory (MiB) per allocation of the group, as Nomad counts them."""

    cpu: Annotated[StrictInt, Field(ge=1)] = 100
    memory: Mib = 300
    memory_max: Mib | None = None

    @model_validator(mode="after")
    def _max_above_memory(self) -> ResourcesSpec:
        if self.memory_max is not None and self.memory_max < self.memory:
            raise ValueError(f"memory_max ({self.memory_max}) must be >= memory ({self.memory})")
        return self


class GpuSpec(_Model):
    """Whole GPUs per allocation, optionally restricted to models and a minimum memory."""

    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    models: list[ModelName] | None = None
    min_memory_mib: Annotated[StrictInt, Field(ge=1)] | None = None
    nvlink: Annotated[bool, Field(strict=True)] = False

    @model_validator(mode="after")
    def _nvlink_needs_a_set(self) -> GpuSpec:
        if self.nvlink and self.count < 2:
            raise ValueError(f"nvlink: true needs count >= 2 (got {self.count}): one GPU has no link to another")
        return self

    @field_validator("models")
    @classmethod
    def _models_listed_once(cls, models: list[str] | None) -> list[str] | None:
        if models is not None and not models:
            raise ValueError("must list at least one model (or be left out)")
        if models is not None and len(set(models)) != len(models):
            raise ValueError("lists a model twice")
        return models


class MigSpec(_Model):
    """MIG instances of one profile (``3g.40gb``) per allocation."""

    profile: Annotated[
        str,
        Field(strict=True),
        _matching(r"[1-7]g\.[0-9]{1,4}gb(\+[a-z]{1,8})?", "a MIG profile like '3g.40gb'", 18),
    ]
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1


class ShareSpec(_Model):
    """A time-slice share of one shared GPU, in milli-GPU (1000 = the whole GPU)."""

    milli: Annotated[StrictInt, Field(ge=1, le=999)]


builtin_spec_kinds(GpuSpec, MigSpec, ShareSpec)  # the kind fields below: render/speckinds.py


class DevSpec(_Model):
    """How the embedded dev cluster should "run" the job; ignored by a real Nomad."""

    duration_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    fail: Annotated[bool, Field(strict=True)] = False
    gpu_util: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] | None = None
    exit_on_signal_after_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


class GroupSpec(_Model):
    """One Nomad task group: ``count`` allocations of one task, and their capacity."""

    name: Label
    count: Annotated[StrictInt, Field(ge=1, le=1000)] = 1
    task: TaskSpec
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    gpu: GpuSpec | None = None
    mig: MigSpec | None = None
    share: ShareSpec | None = None
    workload_class: WorkloadClass | None = Field(default=None, alias="class")
    """Overrides the job's class for this group."""
    gpu_memory: GpuMemory | None = None
    """What the workload needs on its GPU; with a class, the service chooses the kind that holds it."""
    ports: Ports = Field(default_factory=dict)
    """Named ports, rendered as the group's Nomad `network` block; the address Nomad assigns is shown in
    the entry's `addresses`."""
    service: ServiceSpec | None = None
    """A service registration (Nomad's catalogue by default) on one of `ports`, with a health check."""

    @model_validator(mode="after")
    def _service_on_a_port(self) -> GroupSpec:
        check_service_port(self.ports, self.service)
        return self

    _kinds: dict[str, BaseModel] = PrivateAttr(default_factory=dict)
    """The values of kind fields registered beyond gpu, mig and share (render/speckinds.py)."""

    @model_validator(mode="wrap")
    @classmethod
    def _one_capacity_kind(cls, data: Any, handler: ModelWrapValidatorHandler[GroupSpec]) -> GroupSpec:
        added: dict[str, BaseModel] = {}
        if isinstance(data, dict) and any(f in data for f in added_fields()):
            data = dict(data)
            for f in added_fields():
                if f in data:
                    added[f] = validate_added(f, data.pop(f))
        group = handler(data)
        group._kinds.update(added)
        kinds = [k.field for k in spec_kinds() if group.kind_value(k.field) is not None]
        if len(kinds) > 1:
            raise ValueError(f"set at most one of {', '.join(k.field for k in spec_kinds())} "
                             f"(got {' and '.join(kinds)})")
        if group.gpu_memory is not None and kinds and kinds[0] != "gpu":
            raise ValueError(f"gpu_memory sizes a choice the service makes; {kinds[0]} names the kind itself: "
                             "give one or the other")
        if group.gpu_memory is not None and group.gpu is not None and group.gpu.min_memory_mib is not None:
            raise ValueError("give gpu_memory or gpu.min_memory_mib, not both")
        return group

    @model_serializer(mode="wrap")
    def _with_added_kinds(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if self._kinds and isinstance(data, dict):
            data.update({f: v.model_dump(mode=info.mode) for f, v in self._kinds.items()})
        return data

    def kind_value(self, field: str) -> Any:
        """The value of the group's kind field ``field`` (``gpu``, ``mig``, ``share`` or a registered one)."""
        return self._kinds.get(field) if field in self._kinds else getattr(self, field, None)

    @property
    def gpu_memory_bytes(self) -> int | None:
        """The stated need in bytes (rounded up), or None when the group gives no `gpu_memory`."""
        return None if self.gpu_memory is None else gpu_memory_bytes(self.gpu_memory)

    @property
    def capacity_kind(self) -> str | None:
        """Which kind field the group asks by (``gpu``, ``mig``, ``share``, ...), or None for a CPU-only group."""
        return next((k.field for k in spec_kinds() if self.kind_value(k.field) is not None), None)

    @property
    def device_count(self) -> int:
        """Device instances ONE allocation of the group holds (0 for share / no GPU)."""
        field = self.capacity_kind
        return 0 if field is None else spec_kind(field).devices(self.kind_value(field))


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


class _SpecBase(_Model):
    name: Name
    team: Label = "default"
    priority: Annotated[StrictInt, Field(ge=1, le=100)] = 50
    datacenters: Annotated[list[NonEmptyText], Field(min_length=1)] = Field(default_factory=lambda: ["*"])
    namespace: Label = "default"
    node_pool: Label | None = None
    template: Annotated[
        str, Field(strict=True), _matching(r"[a-z0-9][a-z0-9_-]{0,63}", "a template name like 'batch'", 64)
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
        list[Annotated[str, Field(strict=True), _matching(r"[a-z0-9][a-z0-9-]{0,63}", "an entry or sweep ID", 64)]],
        Field(max_length=64),
    ] = Field(default_factory=list)
    """Entry or sweep IDs of the same team: start only after every one of them completed successfully; if
    one fails or is cancelled, this ends `dependency-failed` without running."""
    allow_unschedulable: Annotated[bool, Field(strict=True)] = False
    """Queue it even if no node of the fleet (in its pool and datacenters) could ever run it: for a fleet
    about to grow. Without it such a submission is refused with the nearest thing the fleet offers."""

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


def _number(value: object) -> object:
    """YAML reads `1e-5` (no dot) as text: a range bound may be written so, as in Python."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


VALUES_TAG, RANGE_TAG = "[values]", "[range]"
"""The two forms of a sweep parameter. Each is validated alone (a mapping is a range), so a mistake gets
the errors of the form it is, not both; the loader leaves these tags out of the locations it prints."""


def _values_or_range(value: object) -> str:
    return RANGE_TAG if isinstance(value, dict | SweepRange) else VALUES_TAG


class SweepRange(_Model):
    """A range a random sweep samples from: uniform, log-uniform (``log: true``) or whole numbers (``int: true``)."""

    min: Annotated[float, BeforeValidator(_number), Field(strict=True, allow_inf_nan=False)]
    """The smallest value drawn."""
    max: Annotated[float, BeforeValidator(_number), Field(strict=True, allow_inf_nan=False)]
    """The largest value drawn."""
    log: Annotated[bool, Field(strict=True)] = False
    """Draw uniformly in log space (learning rates, weight decay): needs min > 0."""
    integer: Annotated[bool, Field(strict=True)] = Field(default=False, alias="int")
    """Draw whole numbers from min to max, both included (batch sizes, layer counts)."""

    @model_validator(mode="after")
    def _ordered(self) -> SweepRange:
        if self.min >= self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        if self.log and self.min <= 0:
            raise ValueError(f"log: true needs min > 0 (got {self.min:g})")
        if self.integer and not (self.min.is_integer() and self.max.is_integer()):
            raise ValueError("int: true needs whole-number min and max")
        return self

    @property
    def choices(self) -> int | None:
        """How many distinct values it can give: the integers from min to max, or None (any number)."""
        return int(self.max - self.min) + 1 if self.integer else None


class SweepConfig(_Model):
    """Which parameter combinations a sweep runs, and how many at once."""

    parameters: dict[
        Annotated[
            str,
            Field(strict=True),
            _matching(r"[A-Za-z_][A-Za-z0-9_]{0,63}", "a parameter name ([A-Za-z_][A-Za-z0-9_]*)", 64),
        ],
        Annotated[
            Annotated[Annotated[list[SweepValue], Field(min_length=1)], Tag(VALUES_TAG)]
            | Annotated[SweepRange, Tag(RANGE_TAG)],
            Discriminator(_values_or_range),
        ],
    ] = Field(min_length=1)
    mode: Literal["grid", "random"] = "grid"
    trials: Annotated[StrictInt, Field(ge=1)] | None = None
    seed: StrictInt = 0
    max_parallel: Annotated[StrictInt, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _trials_fit_mode(self, info: ValidationInfo) -> SweepConfig:
        upper = [name.upper() for name in self.parameters]
        if len(set(upper)) != len(upper):
            raise ValueError("parameter names must differ in more than case (they become TRIAL_<NAME>)")
        cap = (info.context or {}).get(MAX_TRIALS_CONTEXT) or TRIALS_CEILING
        limit = min(int(cap), TRIALS_CEILING)
        size = self.grid_size  # a product of list lengths: known before anything is expanded
        if self.mode == "grid":
            if ranges := [name for name, v in self.parameters.items() if isinstance(v, SweepRange)]:
                raise ValueError(f"parameter {ranges[0]!r} is a range: ranges are sampled by mode: random "
                                 "(a grid needs a list of values)")
            if self.trials is not None:
                raise ValueError("trials is only used with mode: random (a grid runs every combination)")
            if size > limit:
                raise ValueError(f"the grid has {size} combinations, more than the limit of {limit}")
        elif self.trials is None:
            raise ValueError("trials is required with mode: random")
        elif self.trials > limit:
            raise ValueError(f"trials ({self.trials}) is more than the limit of {limit}")
        elif self.trials > size:
            raise ValueError(f"trials ({self.trials}) is more than the {size} distinct combinations; use mode: grid")
        return self

    @property
    def grid_size(self) -> int:
        """The number of distinct parameter combinations (a range of any numbers counts as more than any
        sweep may draw: TRIALS_CEILING + 1)."""
        size = 1
        for values in self.parameters.values():
            if isinstance(values, SweepRange):
                size *= values.choices if values.choices is not None else TRIALS_CEILING + 1
            else:
                size *= len(values)
        return size

    @property
    def trial_count(self) -> int:
        """How many trials the sweep expands to."""
        return self.grid_size if self.mode == "grid" else (self.trials or 0)


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
