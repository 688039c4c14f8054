"""Durations as a spec writes them: seconds as a number, or text like `90s`, `30m`, `4h`, `1d`, `1h30m`.

One reading for every duration of a spec (`runtime`, `max_runtime`, a checkpoint's `grace`) and of the
service config that takes durations the same way (`preemption:`), so `2m` means the same everywhere.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from nomad_gpu.render.textrules import capped

__all__ = ["DURATION_CAP", "Seconds", "seconds_of"]

DURATION_CAP = 64
"""Characters of a duration at most (`1d2h30m15s` needs 10)."""
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhd] *)+")
"""Parts like `1h`, spaces only after a unit: each character has one place in it, so no backtracking
tries another split (searching the text for parts from every position was quadratic in a run of digits)."""
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds_of(value: Any) -> float:
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


Seconds = Annotated[float, BeforeValidator(seconds_of), Field(gt=0, le=366 * 86400, allow_inf_nan=False)]
"""A positive duration, stored in seconds."""
