"""The spec side of each GPU kind: the group field a user writes for it, and the core's ask it becomes.

A spec group names its GPU capacity by one field per kind (``gpu:``, ``mig:``, ``share:``, and any a
deployment registers): this registry lists them, each with the pydantic model that validates its value,
the core's kind name it asks for (`domain/kinds`, `render/devices`; the `GpuAsk` it becomes is the
service's, `service/asks/kindasks.py`), and how many device instances one allocation of it holds. The built-in three are
fields of `GroupSpec` (so docs/spec.md documents them); a registered kind's field is held beside them
(`GroupSpec.kind_value`) and validated by its model. Registration order is the order validation names
them in ("set at most one of gpu, mig, share").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["BUILTIN_FIELDS", "SpecKind", "builtin_spec_kinds", "register_spec_kind", "spec_kind", "spec_kinds",
           "unregister_spec_kind", "validate_added"]

BUILTIN_FIELDS = ("gpu", "mig", "share")
"""The fields `GroupSpec` declares itself; a registered kind's field is any other name."""


def _none(value: Any) -> int:
    return 0


@dataclass(frozen=True)
class SpecKind:
    """One kind as a spec group names it."""

    field: str
    """The group's field (``gpu``, ``mig``, ``share``, ...), also its top-level shorthand."""
    kind: str
    """The core's kind name (`GpuKind.name`, the device adapter's ``kind``)."""
    model: type[BaseModel]
    """Validates the field's value."""
    devices: Callable[[Any], int] = _none
    """Device instances one allocation holds (0: none pinned by count, as a share)."""


_BY_FIELD: dict[str, SpecKind] = {}


def register_spec_kind(kind: SpecKind) -> SpecKind:
    """Add a kind's field (idempotent for an equal one); another kind under a taken field is a bug."""
    found = _BY_FIELD.get(kind.field)
    if found is not None and found != kind:
        raise ValueError(f"a spec field {kind.field!r} is already registered")
    _BY_FIELD[kind.field] = kind
    return kind


def unregister_spec_kind(field: str) -> None:
    """Remove a field added by `register_spec_kind` (the built-in three stay)."""
    if field not in BUILTIN_FIELDS:
        _BY_FIELD.pop(field, None)


def spec_kinds() -> tuple[SpecKind, ...]:
    """Every registered field, in registration order (the built-ins first: gpu, mig, share)."""
    return tuple(_BY_FIELD.values())


def spec_kind(field: str) -> SpecKind:
    """The kind a group's field names; KeyError if none is registered."""
    return _BY_FIELD[field]


def added_fields() -> tuple[str, ...]:
    """The registered fields beyond the built-in three."""
    return tuple(f for f in _BY_FIELD if f not in BUILTIN_FIELDS)


def validate_added(field: str, value: Any) -> BaseModel:
    """A registered field's value, validated by its model; a ValueError naming the first problem (the spec's
    loader locates it on the group)."""
    try:
        return spec_kind(field).model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in (field, *first["loc"]))
        raise ValueError(f"{where}: {first['msg']}") from None


def _count(value: Any) -> int:
    return int(value.count)


def builtin_spec_kinds(gpu: type[BaseModel], mig: type[BaseModel], share: type[BaseModel]) -> None:
    """Register ``gpu:``, ``mig:`` and ``share:`` with their models (`render/spec.py` calls it once)."""
    register_spec_kind(SpecKind("gpu", "whole", gpu, _count))
    register_spec_kind(SpecKind("mig", "mig", mig, _count))
    register_spec_kind(SpecKind("share", "share", share))
