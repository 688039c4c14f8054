"""Where a spec error is: a pydantic location as the user reads it, groups by name (`groups[main].gpu.count`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nomad_gpu.render.textrules import SHOWN, shown

__all__ = ["GroupName", "format_location", "name_groups"]

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A valid group name (spec.Label): only such a name is written into a location."""


class GroupName(str):
    """A group's place in a location, said by its name: ``groups[main]``, not ``groups[0]``."""

    __slots__ = ()


def name_groups(loc: Sequence[int | str], data: object) -> list[int | str]:
    """``loc`` with the index after ``groups`` replaced by that group's name, where the spec gives it a valid
    one (an invalid or missing name keeps the index: the name itself is then what is wrong)."""
    out = list(loc)
    if len(out) >= 2 and out[0] == "groups" and isinstance(out[1], int) and isinstance(data, Mapping):
        groups = data.get("groups")
        if isinstance(groups, list) and out[1] < len(groups) and isinstance(groups[out[1]], Mapping):
            name = groups[out[1]].get("name")
            if isinstance(name, str) and _LABEL.fullmatch(name):
                out[1] = GroupName(name)
    return out


def format_location(loc: Sequence[int | str]) -> str:
    """``("groups", 0, "gpu", "count")`` -> ``groups[0].gpu.count``; a :class:`GroupName` -> ``groups[main]``."""
    out = ""
    for part in loc:
        if isinstance(part, int | GroupName):
            out += f"[{part}]"
        elif part.isidentifier() and len(part) <= SHOWN:
            out += f".{part}" if out else part
        else:
            out += f"[{shown(part)}]"  # a key the user wrote: quoted, and cut when long
    return out
