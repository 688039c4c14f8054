"""How long a job is expected to run, for the queue's ETAs, when its spec gives no `runtime:`.

A forecast with no run time for what runs ahead says "unknown" for everything behind it. Slurm answers
`squeue --start` from a job's time limit, or the partition's DefaultTime when the job has none; here the
operator's defaults per workload class, then per template, stand in (`runtime_defaults:` in the service
config, with the values of `nomad_gpu.defaults` where it says nothing). An ETA built on a default says
so: its `eta_basis` names the default ("class training default"), never passing it off as the user's.
"""

from __future__ import annotations

import bisect
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from nomad_gpu.defaults import CLASS_RUNTIMES_S, TEMPLATE_RUNTIMES_S
from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import EntryId
from nomad_gpu.render import JobSpec
from nomad_gpu.render.durations import Seconds

__all__ = ["FROM_SPEC", "RuntimeDefaults", "eta_bases", "runtime_defaults_from_mapping"]

FROM_SPEC = "runtime"
"""The basis of an estimate the spec's own `runtime:` gave."""


def _frozen(values: Mapping[str, float | None]) -> Mapping[str, float | None]:
    return types.MappingProxyType(dict(values))


@dataclass(frozen=True)
class RuntimeDefaults:
    """Run times by workload class and by template (seconds; None: runs until stopped)."""

    classes: Mapping[str, float | None] = field(default_factory=lambda: _frozen(CLASS_RUNTIMES_S))
    templates: Mapping[str, float | None] = field(default_factory=lambda: _frozen(TEMPLATE_RUNTIMES_S))

    def estimate(self, spec: JobSpec | None) -> tuple[float | None, str]:
        """(seconds or None, what it comes from): the spec's `runtime:`, else its class's default, else its
        template's; ("", None) where none applies."""
        if spec is None:
            return None, ""
        if spec.runtime is not None:
            return spec.runtime, FROM_SPEC
        for group in spec.groups:
            cls = spec.class_of(group)
            if cls is not None:
                name = WorkloadClass(cls).value
                if name in self.classes:
                    return self.classes[name], f"class {name} default"
        if spec.template in self.templates:
            return self.templates[spec.template], f"template {spec.template} default"
        return None, ""


def runtime_defaults_from_mapping(raw: Any, where: str = "runtime_defaults") -> RuntimeDefaults:
    """`runtime_defaults: {classes: {training: 2h}, templates: {batch: 1h}}`; a name left out keeps its
    default; `null` (or `none`) says it runs until stopped."""
    base = RuntimeDefaults()
    if raw is None:
        return base
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping with classes / templates")
    unknown = sorted(str(k) for k in set(raw) - {"classes", "templates"})
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)} (known: classes, templates)")
    classes = dict(base.classes)
    for name, value in _pairs(raw.get("classes"), f"{where}.classes").items():
        try:
            WorkloadClass.parse(name)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}.classes: {exc}") from exc
        classes[name] = _duration(value, f"{where}.classes.{name}")
    templates = dict(base.templates)
    for name, value in _pairs(raw.get("templates"), f"{where}.templates").items():
        templates[name] = _duration(value, f"{where}.templates.{name}")
    return RuntimeDefaults(_frozen(classes), _frozen(templates))


def _pairs(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping of name to a duration like 2h (or null)")
    return {str(k): v for k, v in raw.items()}


def _duration(value: Any, where: str) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    try:
        return float(_SECONDS.validate_python(value))  # read as a spec's `runtime:` is
    except ValidationError:
        raise InvalidRequest(f"{where}: must be a duration like 30m or 4h (more than 0, at most 366d), or "
                             "null for runs until stopped") from None


_SECONDS: TypeAdapter[float] = TypeAdapter(Seconds)


def eta_bases(ends: Mapping[EntryId, float | None], starts: Mapping[EntryId, float | None],
              runtimes: Mapping[EntryId, float | None], sources: Mapping[EntryId, str],
              ) -> dict[EntryId, tuple[float | None, str]]:
    """Each live entry's end and each queued one's start, with its basis: a live entry's own estimate; for
    a queued one the defaults among the ends at or before its start (what it waits for), so an entry behind
    jobs with `runtime:` only reads "runtime" even when a default is used further back in the queue."""
    known: list[tuple[float, str]] = [(end, sources.get(e, "")) for e, end in ends.items() if end is not None]
    known += [(start + run, sources.get(e, "")) for e, start in starts.items()
              if start is not None and (run := runtimes.get(e)) is not None]
    known.sort()
    prefix: list[frozenset[str]] = []
    seen: frozenset[str] = frozenset()
    for _, source in known:
        if source and source != FROM_SPEC:
            seen = seen | {source}
        prefix.append(seen)
    times = [end for end, _ in known]
    out: dict[EntryId, tuple[float | None, str]] = {}
    for e, end in ends.items():
        source = sources.get(e, "")
        out[e] = (end, "" if end is None else source if source == FROM_SPEC else f"estimate from {source}")
    for e, start in starts.items():
        if start is None:
            out[e] = (None, "")
            continue
        i = bisect.bisect_right(times, start)
        used = prefix[i - 1] if i else frozenset()
        out[e] = (start, f"estimate from {', '.join(sorted(used))}" if used else FROM_SPEC)
    return out
