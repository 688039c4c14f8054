"""The ``sweep:`` section of a sweep spec: its parameters (lists or ranges), mode, trial count and cap.

Validated before anything is expanded: a grid's size is a product of list lengths, so a sweep past the
configured cap is refused here, and :mod:`nomad_gpu.render.sweep` only expands what passed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, ValidationInfo, model_validator

from nomad_gpu.render.specfields import SpecModel, StrictInt, SweepValue, matching

MAX_TRIALS = 10_000
"""The service's default cap on the trials of one sweep (``max_trials`` in its config)."""
TRIALS_CEILING = 100_000
"""The most trials any sweep may expand to, whatever is configured: the bound when no cap is given."""
MAX_TRIALS_CONTEXT = "max_trials"
"""Validation context key that carries the cap (``model_validate(..., context={...})``)."""


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


class SweepRange(SpecModel):
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


class SweepConfig(SpecModel):
    """Which parameter combinations a sweep runs, and how many at once."""

    parameters: dict[
        Annotated[
            str,
            Field(strict=True),
            matching(r"[A-Za-z_][A-Za-z0-9_]{0,63}", "a parameter name ([A-Za-z_][A-Za-z0-9_]*)", 64),
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
