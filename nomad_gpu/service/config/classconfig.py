"""The `classes:` section of the service config: the operator's policy per workload class (DESIGN 14).

```yaml
classes:
  serving:
    tiers: [[mig], [gpu]]       # first tier with a feasible option wins; the score chooses within it
    default_gpu_memory: 8GiB    # a serving group with no size needs this much
    allow_explicit: [share]     # let a spec say `share:` beside `class: serving` (breaks isolation)
  training: {tiers: [[gpu]], default_count: 1}
```

A class the file leaves out keeps its default (`nomad_gpu.domain.classes.DEFAULT_RULES`); a key a class
leaves out keeps that class's default, never a second copy of it. Sizes are read exactly as a spec's
`gpu_memory` is. Every error names the key, in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, cast

from nomad_gpu.domain.classes import DEFAULT_RULES, ClassPolicy, ClassRule, KindName, WorkloadClass, kind_words
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.render.gpumemory import gpu_memory_bytes
from nomad_gpu.service.config.preemptconfig import CLASS_KEYS

__all__ = ["classes_from_mapping"]

_KEYS = frozenset({"tiers", "default_gpu_memory", "default_count", "allow_explicit", "idle"}) | CLASS_KEYS
"""`idle` is idle reclaim's policy, read by service/config/idleconfig.py; `preempts` and `preemptible` are read by
service/config/preemptconfig.py."""


def classes_from_mapping(raw: Any, where: str = "classes") -> ClassPolicy:
    """The policy from the config's `classes:` mapping (None or empty: every default)."""
    if raw is None:
        return ClassPolicy()
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping of class name to its policy")
    rules: dict[WorkloadClass, ClassRule] = dict(DEFAULT_RULES)
    for name, body in raw.items():
        try:
            cls = WorkloadClass.parse(str(name))
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}: {exc}") from exc
        rules[cls] = _rule(body, DEFAULT_RULES[cls], f"{where}.{cls.value}")
    return ClassPolicy(MappingProxyType(rules))


def _rule(body: Any, default: ClassRule, where: str) -> ClassRule:
    if not isinstance(body, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping with tiers / default_gpu_memory / default_count / "
                             "allow_explicit / idle")
    unknown = sorted(str(k) for k in set(body) - _KEYS)
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)}")
    rule = default
    try:
        if "tiers" in body:
            rule = replace(rule, tiers=_tiers(body["tiers"], f"{where}.tiers"))
        if "default_gpu_memory" in body:
            value = body["default_gpu_memory"]
            rule = replace(rule, default_gpu_memory=None if value is None else _bytes(value,
                                                                                      f"{where}.default_gpu_memory"))
        if "default_count" in body:
            count = body["default_count"]
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
                raise InvalidRequest(f"{where}.default_count: must be an integer from 1 to 64")
            rule = replace(rule, default_count=count)
        if "allow_explicit" in body:
            rule = replace(rule, allow_explicit=frozenset(_kinds(body["allow_explicit"], f"{where}.allow_explicit")))
    except InvalidRequest as exc:
        text = str(exc)
        raise InvalidRequest(text if text.startswith(where) else f"{where}: {text}") from exc
    return rule


def _tiers(raw: Any, where: str) -> tuple[tuple[KindName, ...], ...]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest(f"{where}: must be a non-empty list of tiers, each a list of kinds (gpu, mig, share)")
    return tuple(tuple(_kinds(tier, f"{where}[{i}]")) for i, tier in enumerate(raw))


def _kinds(raw: Any, where: str) -> list[KindName]:
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise InvalidRequest(f"{where}: must be a list of kinds ({', '.join(kind_words())})")
    bad = [k for k in raw if k not in kind_words()]
    if bad:
        raise InvalidRequest(f"{where}: unknown kind {bad[0]!r}; known: {', '.join(kind_words())}")
    return [cast(KindName, k) for k in raw]


def _bytes(value: Any, where: str) -> int:
    try:
        return gpu_memory_bytes(value)
    except ValueError as exc:
        raise InvalidRequest(f"{where}: {exc}") from exc
