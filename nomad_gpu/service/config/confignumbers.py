"""Reading a config section of numbers into a frozen dataclass's fields: a mapping, no unknown key,
each value checked by one rule, defaults from the dataclass. One reader for every such section
(``api.http``, ``api.team_limits``, ``usage``), so they refuse bad input in the same words."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest


def read_numbers(raw: Any, defaults: Any, where: str, valid: Callable[[Any], bool], rule: str) -> dict[str, Any]:
    """The section's value for each field of ``defaults`` (a dataclass instance), or InvalidRequest
    naming the section and key: ``rule`` says what ``valid`` wants of a value."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping")
    fields = defaults.__dataclass_fields__
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    values: dict[str, Any] = {}
    for key in fields:
        value = raw.get(key, getattr(defaults, key))
        if isinstance(value, bool) or not valid(value):
            raise InvalidRequest(f"{where}: {key}: {rule}")
        values[key] = value
    return values
