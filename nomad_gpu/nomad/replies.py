"""The shape of Nomad's replies, checked before anything trusts them.

A 200 whose body is not what Nomad sends (a proxy's page, a version skew, a fault) was taken as it came: a
register reply without an evaluation was counted as a register, and the entry then waited out the
admission deadline with nothing in Nomad; a list where an object belongs ended in a TypeError. Here a
malformed reply is a MalformedReply, which the client turns into a NomadUnavailable (retried like any other
Nomad failure; a register is create-only, so its retry cannot place a second copy). Field names are
Nomad's (`nomad/structs`, v2.0.5).
"""

from __future__ import annotations

from typing import Any


class MalformedReply(ValueError):
    """A reply of the wrong shape (the client's edge turns it into a NomadUnavailable)."""


def malformed(what: str, why: str) -> MalformedReply:
    return MalformedReply(f"{what}: a malformed reply from Nomad ({why})")


def mapping(value: Any, what: str, **fields: type) -> dict[str, Any]:
    """``value`` as an object with each of ``fields`` of its type (an int is never a bool)."""
    if not isinstance(value, dict):
        raise malformed(what, f"expected an object, got {type(value).__name__}")
    for key, kind in fields.items():
        field = value.get(key)
        if not isinstance(field, kind) or (kind is int and isinstance(field, bool)):
            raise malformed(what, f"{key} is {type(field).__name__}, not {kind.__name__}")
    return value


def objects(value: Any, what: str) -> list[dict[str, Any]]:
    """``value`` as a list of objects."""
    if not isinstance(value, list):
        raise malformed(what, f"expected a list, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, dict):
            raise malformed(what, f"a list item is {type(item).__name__}, not an object")
    return value


def registered(value: Any, what: str) -> dict[str, Any]:
    """A JobRegisterResponse: an evaluation ID (empty for a job that needs none) and the job's new index."""
    reply = mapping(value, what, EvalID=str, JobModifyIndex=int)
    if reply["JobModifyIndex"] <= 0:
        raise malformed(what, "JobModifyIndex is not positive")
    return reply
