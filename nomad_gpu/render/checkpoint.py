"""A job's checkpoint grace (DESIGN 17): the signal its task gets first when its GPUs are taken back, and how
long it may take to save its state before it is killed.

Rendered as Nomad's task `kill_signal` and `kill_timeout`. Nomad's client caps `kill_timeout` at its own
`max_kill_timeout` (30 s by default, command/agent/config.go `DefaultConfig`; `NewDriverHandle` in
client/allocrunner/taskrunner/driver_handle.go, v2.0.5), which the API cannot tell: the service config's
`nomad.max_kill_timeout` says what the nodes honour, and a longer grace is accepted with a warning.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from nomad_gpu.render.durations import seconds_of

__all__ = ["DEFAULT_KILL_TIMEOUT_S", "MAX_GRACE_S", "SIGNALS", "CheckpointSpec", "grace_s"]

SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGALRM")
"""Signals a task can catch to save its state (SIGKILL and SIGSTOP cannot be caught: no grace in them)."""
MAX_GRACE_S = 3600.0
"""The longest grace a spec may ask for: an hour of held GPUs per take-back is already a lot."""
DEFAULT_KILL_TIMEOUT_S = 5.0
"""Nomad's default `kill_timeout` (api/tasks.go `Task.Canonicalize`, v2.0.5): the grace without `checkpoint:`."""
DEFAULT_GRACE_S = 120.0


def _grace(value: object) -> object:
    seconds = seconds_of(value)
    if seconds <= 0 or seconds > MAX_GRACE_S:
        raise ValueError(f"must be more than 0 s and at most {MAX_GRACE_S:g} s, got {seconds:g} s")
    return seconds


class CheckpointSpec(BaseModel):
    """How the job saves its state when its GPUs are taken back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: Literal["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGALRM"] = \
        "SIGTERM"
    """The signal the task receives first (Nomad's `kill_signal`)."""
    grace: Annotated[float, BeforeValidator(_grace), Field(allow_inf_nan=False)] = DEFAULT_GRACE_S
    """How long it may take to save its state before it is killed (Nomad's `kill_timeout`)."""


def grace_s(checkpoint: CheckpointSpec | None) -> float:
    """The grace a stop gives the job: its checkpoint's, else Nomad's default kill_timeout."""
    return checkpoint.grace if checkpoint is not None else DEFAULT_KILL_TIMEOUT_S
