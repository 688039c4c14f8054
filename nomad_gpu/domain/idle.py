"""Idle reclaim's policy per workload class, and the verdict on one running job (DESIGN 17).

GPUs held by interactive and exploratory work sit idle most of the time. An operator says, per class,
after how long an idle job is warned, after how long it is acted on, and how: `warn` only flags it,
`stop` ends it (`reclaimed`), `requeue` stops it and queues it again. With `only_when_waiting` (the
default) nothing is taken while no waiting job would fit the capacity it frees: a take-back weighs the
queue. The job's owner may postpone it (`keep`) up to `max_keep`.

Pure: the verdict takes the times and says what is due, with the words a user reads; the service measures
idleness (service/loops/usage.py) and performs the reclaim (service/loops/reclaim.py).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest

MAX_WINDOW_S = 7 * 86400.0
"""An idle window or a keep longer than a week is a typo (`after: 30d`), not a policy: refused."""
DEFAULT_MAX_KEEP_S = 4 * 3600.0


class IdleAction(enum.Enum):
    WARN = "warn"
    STOP = "stop"
    REQUEUE = "requeue"

    @staticmethod
    def parse(name: str) -> IdleAction:
        try:
            return IdleAction(name)
        except ValueError:
            raise InvalidRequest(f"unknown action {name!r}; known: warn, stop, requeue") from None

    @property
    def verb(self) -> str:
        return {IdleAction.WARN: "flagged", IdleAction.STOP: "stopped", IdleAction.REQUEUE: "re-queued"}[self]


@dataclass(frozen=True)
class IdlePolicy:
    """One class's rule (`classes.<class>.idle`)."""

    after_s: float
    """Idle this long: the action is due."""
    action: IdleAction = IdleAction.WARN
    warn_after_s: float | None = None
    """Idle this long: the user is warned (None: at `after_s`)."""
    only_when_waiting: bool = True
    """Act only while a waiting job would fit the capacity it frees; else only warn."""
    max_keep_s: float = DEFAULT_MAX_KEEP_S
    """The longest a `keep` may postpone the action."""

    def __post_init__(self) -> None:
        for key, value in (("after", self.after_s), ("warn_after", self.warn_after_s), ("max_keep", self.max_keep_s)):
            if value is not None and (not math.isfinite(value) or not 0 < value <= MAX_WINDOW_S):
                raise InvalidRequest(f"{key}: must be more than 0 and at most {MAX_WINDOW_S / 86400:.0f} days")
        if self.warn_after_s is not None and self.warn_after_s > self.after_s:
            raise InvalidRequest("warn_after: must not be longer than after")

    @property
    def warn_s(self) -> float:
        return self.after_s if self.warn_after_s is None else self.warn_after_s

    @property
    def takes_back(self) -> bool:
        return self.action is not IdleAction.WARN


DEFAULT_IDLE: Mapping[WorkloadClass, IdlePolicy | None] = MappingProxyType({
    WorkloadClass.INTERACTIVE: IdlePolicy(after_s=1800.0, warn_after_s=1200.0, action=IdleAction.STOP),
    WorkloadClass.EXPLORATORY: IdlePolicy(after_s=1800.0),
    WorkloadClass.HPO: IdlePolicy(after_s=1800.0),
    WorkloadClass.TRAINING: None,
    WorkloadClass.SERVING: None,
})
"""The defaults (docs/idle.md): an interactive session is warned after 20 min idle and stopped after 30 min,
only while a job waits for its GPUs; exploratory and HPO work is only flagged; training and serving never."""


@dataclass(frozen=True)
class IdleVerdict:
    """Where one running job stands."""

    idle_s: float
    warned: bool
    """Idle past the warning window."""
    due: bool
    """Idle past `after`, not kept, and the action takes GPUs back: reclaim it if the queue says so."""
    act_in_s: float | None
    """Seconds until the action is due (0 once due; None: the policy only warns)."""
    kept_s: float | None
    """Seconds a `keep` still postpones it; None: not kept."""
    text: str


def judge(policy: IdlePolicy, idle_since: float | None, now: float,
          kept_until: float | None = None) -> IdleVerdict | None:
    """The verdict on a job idle since `idle_since` (None: not idle, no verdict), kept until `kept_until`."""
    if idle_since is None:
        return None
    idle_s = max(now - idle_since, 0.0)
    kept_s = kept_until - now if kept_until is not None and kept_until > now else None
    act_in = max(policy.after_s - idle_s, kept_s or 0.0, 0.0) if policy.takes_back else None
    due = policy.takes_back and kept_s is None and idle_s >= policy.after_s
    warned = idle_s >= policy.warn_s
    return IdleVerdict(idle_s, warned, due, act_in, kept_s, _text(policy, idle_s, act_in, kept_s))


def _text(policy: IdlePolicy, idle_s: float, act_in: float | None, kept_s: float | None) -> str:
    head = f"idle {int(idle_s // 60)} min"
    if act_in is None:
        return head
    verb = policy.action.verb
    when = " if a job is waiting" if policy.only_when_waiting else ""
    if kept_s is not None:
        return f"{head}: kept {minutes_left(kept_s)} min more, then will be {verb}{when}"
    if act_in > 0:
        return f"{head}: will be {verb} in {minutes_left(act_in)} min{when}"
    return f"{head}: will be {verb} when a job is waiting" if policy.only_when_waiting else f"{head}: being {verb}"


def minutes_left(seconds: float) -> int:
    """A time still to go in whole minutes, rounded up: never "in 0 min" while it is not due."""
    return max(math.ceil(seconds / 60.0 - 1e-9), 1)


def reclaim_reason(idle_s: float, beneficiary: str) -> str:
    """The reason stored on a reclaimed job (`idle <n> min: stopped for <entry>`)."""
    return f"idle {int(idle_s // 60)} min: stopped for {beneficiary}"
