"""A group of a job spec: its task, its CPU and memory, and the GPU capacity it asks for.

One Nomad task group is what the scheduler places: ``count`` allocations of one task, each with at most
one capacity kind (``gpu``, ``mig``, ``share`` or a registered one, :mod:`nomad_gpu.render.speckinds`).
The job-level model (:mod:`nomad_gpu.render.spec`) holds a list of these.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from nomad_gpu.render.durations import DURATION_CAP
from nomad_gpu.render.gpumemory import UNITS, gpu_memory_bytes, mib_covering
from nomad_gpu.render.network import Ports, ServiceSpec, check_service_port
from nomad_gpu.render.specfields import (
    EnvKey,
    GpuMemory,
    Label,
    ModelName,
    NonEmptyText,
    SpecModel,
    StrictInt,
    Text,
    WorkloadClass,
    matching,
)
from nomad_gpu.render.speckinds import added_fields, builtin_spec_kinds, spec_kind, spec_kinds, validate_added
from nomad_gpu.render.textrules import capped, shown

MAX_ENV_ENTRIES = 1000
"""Env variables (and command-line arguments) of one task at most: a task needs tens, and each entry held
for a queued spec costs the service memory (60,000 of them made one entry cost 15 MB)."""
RESERVED_ENV = frozenset({"NVIDIA_VISIBLE_DEVICES"})
"""Env a user may not set: nomad-gpu (or the device plugin) decides which GPUs a task sees."""


class TaskSpec(SpecModel):
    """What runs: driver, image, command line and environment."""

    driver: Annotated[str, Field(strict=True), matching(r"[a-z0-9_-]{1,64}", "a Nomad driver name", 64)] = "docker"
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


class ResourcesSpec(SpecModel):
    """CPU (MHz) and memory (MiB) per allocation of the group, as Nomad counts them."""

    cpu: Annotated[StrictInt, Field(ge=1)] = 100
    memory: Mib = 300
    memory_max: Mib | None = None

    @model_validator(mode="after")
    def _max_above_memory(self) -> ResourcesSpec:
        if self.memory_max is not None and self.memory_max < self.memory:
            raise ValueError(f"memory_max ({self.memory_max}) must be >= memory ({self.memory})")
        return self


class GpuSpec(SpecModel):
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


class MigSpec(SpecModel):
    """MIG instances of one profile (``3g.40gb``) per allocation."""

    profile: Annotated[
        str,
        Field(strict=True),
        matching(r"[1-7]g\.[0-9]{1,4}gb(\+[a-z]{1,8})?", "a MIG profile like '3g.40gb'", 18),
    ]
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1


class ShareSpec(SpecModel):
    """A time-slice share of one shared GPU, in milli-GPU (1000 = the whole GPU)."""

    milli: Annotated[StrictInt, Field(ge=1, le=999)]


builtin_spec_kinds(GpuSpec, MigSpec, ShareSpec)  # the kind fields below: render/speckinds.py


class GroupSpec(SpecModel):
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

