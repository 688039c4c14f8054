"""The field types a job spec is written in: text rules, names, labels and the base model.

Every spec model (a group's, a sweep's, the job's own) is built from the same few constrained types;
they live here, below the models, so each model module reads them from one place and no two modules
define what a name or a label may be.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator

from nomad_gpu.render.gpumemory import gpu_memory_bytes
from nomad_gpu.render.textrules import TextRule, capped


def matching(pattern: str, what: str, cap: int) -> AfterValidator:
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
Name = Annotated[str, Field(strict=True), matching(r"[a-z0-9-]{1,48}", "1-48 characters of a-z, 0-9, '-'", 48)]
Label = Annotated[
    str,
    Field(strict=True),
    matching(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", "1-64 characters of A-Z, a-z, 0-9, '_', '.', '-'", 64),
]
EnvKey = Annotated[
    str, Field(strict=True), matching(r"[A-Za-z_][A-Za-z0-9_]{0,127}", "an environment variable name", 128)
]
MetaKey = Annotated[
    str,
    Field(strict=True),
    matching(r"[A-Za-z_][A-Za-z0-9_-]{0,127}", "a meta key ([A-Za-z_][A-Za-z0-9_-]*)", 128),
]
SweepValue = Annotated[str | int | float | bool, PlainValidator(_sweep_value)]
"""One value of a sweep parameter, as written in YAML."""


class SpecModel(BaseModel):
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
