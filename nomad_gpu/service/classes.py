"""Between a spec's `class`/`gpu_memory` and the core's classes: checks at submission, sizes per group.

The spec (render) and the policy (domain) do not know each other: this module reads a group's class and
size in the user's terms and gives the core a `WorkloadClass` and a `Size`, with the operator's default
size where the spec gives none. At submission it refuses, in one line, a kind a spec names itself beside a
class whose policy does not take it (`class: serving` with `share:` breaks isolation) unless the config
allows it.
"""

from __future__ import annotations

from nomad_gpu.domain.classes import ClassPolicy, Size, WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.render import JobSpec, SweepSpec
from nomad_gpu.render.spec import GroupSpec

__all__ = ["check_classes", "class_of", "size_of"]


def class_of(spec: JobSpec | SweepSpec, group: GroupSpec) -> WorkloadClass | None:
    name = spec.class_of(group)
    return None if name is None else WorkloadClass(name)


def check_classes(spec: JobSpec | SweepSpec, policy: ClassPolicy) -> None:
    """Refuse an explicit kind beside a class that does not take it (InvalidRequest, one line)."""
    for group in spec.groups:
        cls = class_of(spec, group)
        kind = group.capacity_kind
        if cls is None or kind is None:
            continue
        if group.workload_class is None and spec.workload_class is None:
            continue  # a sweep's implicit `hpo` checks nothing: an explicit kind keeps working as before
        try:
            policy.check_explicit(cls, kind)
        except InvalidRequest as exc:
            raise InvalidRequest(f"groups[{group.name}]: {exc}") from None


def size_of(spec: JobSpec, group: GroupSpec, policy: ClassPolicy) -> Size:
    """The group's size for its class's tiers: its `gpu_memory` (else the class's default), its `gpu.count`
    (else the class's default count) and its `gpu.models`."""
    cls = class_of(spec, group)
    if cls is None:
        raise InvalidRequest(f"groups[{group.name}]: no class to size")
    rule = policy.rule(cls)
    need = group.gpu_memory_bytes
    if need is None:
        need = rule.default_gpu_memory
    count = group.gpu.count if group.gpu is not None else rule.default_count
    models = frozenset(group.gpu.models or ()) if group.gpu is not None else frozenset()
    return Size(need, count, models)
