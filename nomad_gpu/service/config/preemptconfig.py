"""The service config's take-back policy (DESIGN 17): the `preemption:` block, each class's `preempts` and
`preemptible` keys under `classes:`, and `nomad: {max_kill_timeout: 30s}`.

```yaml
preemption: {enabled: true, min_runtime: 5m, max_preemptions: 3, preempt_after: 30s,
             borrow_requires: preemptible}           # durations as the spec writes them; 0s allowed
classes:
  serving:  {preempts: [exploratory, hpo, interactive]}
  training: {preempts: [exploratory, hpo], preemptible: with_checkpoint}   # true | false | with_checkpoint
nomad: {max_kill_timeout: 30s}                         # what the nodes' clients honour (Nomad's default)
```

Left out, each key keeps its default (`domain/preemption.py`). Every error names the key, in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.preemption import NEVER_A_VICTIM, Preemptible, PreemptionPolicy
from nomad_gpu.render.durations import seconds_of

__all__ = ["CLASS_KEYS", "MAX_KILL_TIMEOUT_S", "TakeBackSettings", "entry_warnings", "grace_warning",
           "take_back_from_config"]

CLASS_KEYS = frozenset({"preempts", "preemptible"})
"""Keys of a class under `classes:` that this module reads (service/config/classconfig.py leaves them to it)."""
MAX_KILL_TIMEOUT_S = 30.0
"""Nomad's client `max_kill_timeout` default (command/agent/config.go `DefaultConfig`, v2.0.5)."""
MAX_PREEMPTIONS_CAP = 5
"""The most `max_preemptions` may be: an entry's last 20 moves are kept, and a preempted attempt takes 4."""
_KEYS = frozenset({"enabled", "min_runtime", "max_preemptions", "preempt_after", "borrow_requires"})
BORROW_REQUIRES = ("preemptible", "any")


@dataclass(frozen=True)
class TakeBackSettings:
    preemption: PreemptionPolicy = PreemptionPolicy()
    max_kill_timeout_s: float = MAX_KILL_TIMEOUT_S
    """The longest kill_timeout the nodes honour: a longer checkpoint grace is cut to it by Nomad."""


def take_back_from_config(raw: Mapping[str, Any], where: str = "config") -> TakeBackSettings:
    """The policy from the whole config mapping (`preemption:`, `classes:`, `nomad:`)."""
    policy = _preemption(raw.get("preemption"), f"{where}: preemption")
    policy = _classes(raw.get("classes"), policy, f"{where}: classes")
    return TakeBackSettings(policy, _max_kill_timeout(raw.get("nomad"), f"{where}: nomad.max_kill_timeout"))


def _preemption(raw: Any, where: str) -> PreemptionPolicy:
    if raw is None:
        return PreemptionPolicy()
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping with {', '.join(sorted(_KEYS))}")
    unknown = sorted(str(k) for k in set(raw) - _KEYS)
    if unknown:
        raise InvalidRequest(f"{where}.{unknown[0]}: unknown key; known: {', '.join(sorted(_KEYS))}")
    policy = PreemptionPolicy()
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise InvalidRequest(f"{where}.enabled: must be true or false")
        policy = replace(policy, enabled=raw["enabled"])
    if "min_runtime" in raw:
        policy = replace(policy, min_runtime_s=_duration(raw["min_runtime"], f"{where}.min_runtime"))
    if "preempt_after" in raw:
        policy = replace(policy, preempt_after_s=_duration(raw["preempt_after"], f"{where}.preempt_after"))
    if "max_preemptions" in raw:
        n = raw["max_preemptions"]
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_PREEMPTIONS_CAP:
            raise InvalidRequest(f"{where}.max_preemptions: must be an integer from 0 to {MAX_PREEMPTIONS_CAP}")
        policy = replace(policy, max_preemptions=n)
    if "borrow_requires" in raw:
        if raw["borrow_requires"] not in BORROW_REQUIRES:
            raise InvalidRequest(f"{where}.borrow_requires: must be one of {', '.join(BORROW_REQUIRES)}")
        policy = replace(policy, borrow_requires=str(raw["borrow_requires"]))
    return policy


def _classes(raw: Any, policy: PreemptionPolicy, where: str) -> PreemptionPolicy:
    if not isinstance(raw, Mapping):
        return policy  # classconfig.py says what is wrong with a `classes:` that is not a mapping
    preempts, preemptible = dict(policy.preempts), dict(policy.preemptible)
    for name, body in raw.items():
        if not isinstance(body, Mapping):
            continue  # classconfig.py refuses it
        cls = WorkloadClass.parse(str(name)).value
        if "preempts" in body:
            preempts[cls] = _preempts(body["preempts"], cls, f"{where}.{cls}.preempts")
        if "preemptible" in body:
            preemptible[cls] = _preemptible(body["preemptible"], cls, f"{where}.{cls}.preemptible")
    return replace(policy, preempts=MappingProxyType(preempts), preemptible=MappingProxyType(preemptible))


def _preempts(raw: Any, cls: str, where: str) -> frozenset[str]:
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise InvalidRequest(f"{where}: must be a list of classes")
    known = [c.value for c in WorkloadClass]
    for name in raw:
        if name not in known:
            raise InvalidRequest(f"{where}: unknown class {name!r}; known: {', '.join(known)}")
        if name == cls:
            raise InvalidRequest(f"{where}: a class may not preempt itself ({cls}); a higher priority of the same "
                                 "team already may")
        if name == NEVER_A_VICTIM:
            raise InvalidRequest(f"{where}: {NEVER_A_VICTIM} is never preempted")
    return frozenset(raw)


def _preemptible(raw: Any, cls: str, where: str) -> Preemptible:
    text = {True: "true", False: "false"}.get(raw, raw) if isinstance(raw, bool) else raw
    try:
        value = Preemptible(text)
    except ValueError:
        raise InvalidRequest(f"{where}: must be true, false or with_checkpoint") from None
    if cls == NEVER_A_VICTIM and value is not Preemptible.NO:
        raise InvalidRequest(f"{where}: {NEVER_A_VICTIM} is never preempted")
    return value


def _duration(raw: Any, where: str) -> float:
    try:
        seconds = seconds_of(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{where}: {exc}") from None
    if not 0 <= seconds <= 30 * 86400:
        raise InvalidRequest(f"{where}: must be from 0s to 30d")
    return seconds


def _max_kill_timeout(raw: Any, where: str) -> float:
    if not isinstance(raw, Mapping) or "max_kill_timeout" not in raw:
        return MAX_KILL_TIMEOUT_S
    seconds = _duration(raw["max_kill_timeout"], where)
    if seconds <= 0:
        raise InvalidRequest(f"{where}: must be more than 0s")
    return seconds


def entry_warnings(spec: Mapping[str, Any], max_kill_timeout_s: float) -> tuple[str, ...]:
    """An entry's warnings, from its stored spec (a checkpoint's grace is stored in seconds)."""
    checkpoint = spec.get("checkpoint")
    grace = checkpoint.get("grace") if isinstance(checkpoint, Mapping) else None
    if not isinstance(grace, int | float):
        return ()
    text = grace_warning(float(grace), max_kill_timeout_s)
    return (text,) if text else ()


def grace_warning(grace_s: float, max_kill_timeout_s: float) -> str:
    """The warning for a grace longer than the nodes honour ("" when it is within)."""
    if grace_s <= max_kill_timeout_s:
        return ""
    return (f"checkpoint.grace {grace_s:g} s is longer than the nodes' max_kill_timeout ({max_kill_timeout_s:g} s): "
            f"Nomad kills the task after {max_kill_timeout_s:g} s unless the clients' max_kill_timeout is raised")

