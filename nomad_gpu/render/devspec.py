"""The spec's `dev:` section: how the embedded dev cluster "runs" a job; a real Nomad ignores it.

`gpu_util` is a plain percentage (what the job's devices report while it runs) or a timeline of
`[seconds, percent]` steps from the task's start in dev-cluster time (`[[0, 80], [600, 0]]`: busy for ten
minutes, then idle), so a test can watch a session go idle without waiting for it. Rendered into the
job's meta as `gpu_util_meta` writes it, read back by the dev cluster (devcluster/usage.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

MAX_STEPS = 64
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
Step = tuple[Annotated[float, Field(ge=0, le=366 * 86400, allow_inf_nan=False)], Percent]


SHAPE = "a percentage from 0 to 100, or [seconds, percent] steps with increasing seconds: [[0, 80], [600, 0]]"


def _one_shape(value: object) -> object:
    """One clear line for a value of neither shape (pydantic would list the union's every branch)."""
    if value is None:
        return value
    if isinstance(value, list | tuple):
        ok = 1 <= len(value) <= MAX_STEPS and all(
            isinstance(step, list | tuple) and len(step) == 2 and all(_real(v) for v in step)
            and 0 <= step[1] <= 100 and step[0] >= 0 for step in value)
        if not ok or any(b[0] <= a[0] for a, b in zip(value, value[1:], strict=False)):
            raise ValueError(f"must be {SHAPE} (at most {MAX_STEPS} steps)")
    elif not _real(value) or not 0 <= value <= 100:  # type: ignore[operator]
        raise ValueError(f"must be {SHAPE}")
    return value


def _real(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


Timeline = Annotated[tuple[Step, ...], Field(min_length=1, max_length=MAX_STEPS)]


class DevSpec(BaseModel):
    """How the embedded dev cluster should "run" the job; ignored by a real Nomad."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    duration_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    fail: Annotated[bool, Field(strict=True)] = False
    gpu_util: Annotated[Percent | Timeline | None, BeforeValidator(_one_shape)] = None
    """The GPU utilisation (%) its devices report while it runs (100 when unset), or `[seconds, %]` steps
    from its start in dev-cluster time (100 before the first)."""
    exit_on_signal_after_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


def gpu_util_meta(value: float | tuple[Step, ...]) -> str:
    """`35`, or a timeline as `0:80,600:0` (a Nomad meta value is a string)."""
    if isinstance(value, tuple):
        return ",".join(f"{_number(at)}:{_number(pct)}" for at, pct in value)
    return _number(value)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
