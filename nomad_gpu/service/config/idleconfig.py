"""`classes.<class>.idle` in the service config: idle reclaim's policy per class (domain/idle.py).

```yaml
classes:
  interactive: {idle: {after: 30m, warn_after: 20m, action: stop, only_when_waiting: true, max_keep: 4h}}
  exploratory: {idle: {after: 1h, action: requeue}}
  training:    {idle: {after: 2h, action: warn}}
  hpo:         {idle: null}            # never flagged
```

A class the file leaves out keeps its default (`DEFAULT_IDLE`); an `idle:` mapping is a whole policy (a
key it leaves out takes the policy's default, not the class's). Windows are durations as a spec's
`runtime:` is written. Serving is never a victim (DESIGN 17): it may be flagged, never stopped. Every
error names the key, in one line, and is refused at start.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import TypeAdapter, ValidationError

from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.idle import DEFAULT_IDLE, DEFAULT_MAX_KEEP_S, IdleAction, IdlePolicy
from nomad_gpu.render.durations import Seconds

__all__ = ["IdlePolicies", "check_rounds", "idle_from_classes"]

IdlePolicies = Mapping[WorkloadClass, IdlePolicy | None]
_KEYS = ("after", "warn_after", "action", "only_when_waiting", "max_keep")
_SECONDS: TypeAdapter[float] = TypeAdapter(Seconds)


def idle_from_classes(raw: Any, where: str = "classes") -> IdlePolicies:
    """Each class's idle policy from the config's `classes:` mapping (its other keys are classconfig.py's)."""
    policies = dict(DEFAULT_IDLE)
    if not isinstance(raw, Mapping):
        return MappingProxyType(policies)  # classconfig.py refuses what is not a mapping, in its words
    for name, body in raw.items():
        if not isinstance(body, Mapping) or "idle" not in body:
            continue
        cls = WorkloadClass.parse(str(name))
        policies[cls] = _policy(cls, body["idle"], f"{where}.{cls.value}.idle")
    return MappingProxyType(policies)


def _policy(cls: WorkloadClass, body: Any, where: str) -> IdlePolicy | None:
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping with {', '.join(_KEYS)} (or null: never)")
    unknown = sorted(str(k) for k in set(body) - set(_KEYS))
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_KEYS)})")
    if "after" not in body:
        raise InvalidRequest(f"{where}.after: is required (a duration like 30m)")
    try:
        action = IdleAction.parse(str(body.get("action", "warn")))
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}.action: {exc}") from exc
    if cls is WorkloadClass.SERVING and action is not IdleAction.WARN:
        raise InvalidRequest(f"{where}.action: serving is never stopped for being idle; only warn is allowed")
    waiting = body.get("only_when_waiting", True)
    if not isinstance(waiting, bool):
        raise InvalidRequest(f"{where}.only_when_waiting: must be true or false")
    after = _duration(body["after"], f"{where}.after")
    warn = _duration(body["warn_after"], f"{where}.warn_after") if body.get("warn_after") is not None else None
    keep = _duration(body["max_keep"], f"{where}.max_keep") if "max_keep" in body else DEFAULT_MAX_KEEP_S
    try:
        return IdlePolicy(after_s=after, action=action, warn_after_s=warn, only_when_waiting=waiting, max_keep_s=keep)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}.{exc}") from exc


def _duration(value: Any, where: str) -> float:
    try:
        seconds = float(_SECONDS.validate_python(value))
    except ValidationError:
        raise InvalidRequest(f"{where}: must be a duration like 30m or 4h") from None
    try:
        IdlePolicy(after_s=seconds)  # the one place the bounds of a window are written
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}: {str(exc).partition(': ')[2]}") from exc
    return seconds


def check_rounds(policies: IdlePolicies, interval_s: float, where: str = "classes") -> None:
    """Refuse a window shorter than two of the usage poller's rounds (`usage.interval_s`): it would judge a
    job idle on one reading. With the reads off (0) no job is ever idle, and any window is harmless."""
    for cls, policy in policies.items():
        if policy is None or interval_s <= 0:
            continue
        for key, value in (("after", policy.after_s), ("warn_after", policy.warn_after_s)):
            if value is not None and value < 2 * interval_s:
                raise InvalidRequest(f"{where}.{cls.value}.idle.{key}: {value:g} s is shorter than two rounds of "
                                     f"usage.interval_s ({interval_s:g} s)")
