"""Limits on what the API holds at once: connection deadlines and the connection cap (enforced by
:mod:`nomad_gpu.service.connections`), and what one team may keep queued (enforced in the store's
transaction). Read from the config's ``api.http`` and ``api.team_limits``, with defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest


@dataclass(frozen=True)
class HttpLimits:
    """How long a connection may take to send a request, and how many may be open at once
    (:mod:`nomad_gpu.service.connections`): idle or slow connections must not shut the API for everyone."""

    head_timeout_s: float = 10.0
    """A request's head must be complete this long after the connection opened or its previous answer."""
    body_timeout_s: float = 30.0
    """A request's body must be complete this long after its head."""
    keep_alive_s: float = 5.0
    """An idle connection after an answer is closed after this long without a byte."""
    max_connections: int = 1000
    """Open connections at most (fewer when the file-descriptor limit is lower: half of what it leaves)."""


def http_limits_from_mapping(raw: Any, where: str = "api: http") -> HttpLimits:
    """``api: {http: {head_timeout_s, body_timeout_s, keep_alive_s, max_connections}}``."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping")
    base = HttpLimits()
    unknown = sorted(set(raw) - set(base.__dataclass_fields__))
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    values: dict[str, float] = {}
    for key in base.__dataclass_fields__:
        value = raw.get(key, getattr(base, key))
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
            raise InvalidRequest(f"{where}: {key}: must be a number above 0 (and at most 86400)")
        values[key] = value
    if values["keep_alive_s"] > values["head_timeout_s"]:
        raise InvalidRequest(f"{where}: keep_alive_s must not exceed head_timeout_s")
    return HttpLimits(float(values["head_timeout_s"]), float(values["body_timeout_s"]), float(values["keep_alive_s"]),
                      max(1, int(values["max_connections"])))


@dataclass(frozen=True)
class TeamLimits:
    """What one team may hold at once: past either, a submission is answered 429 until some of it ends."""

    max_entries: int = 20_000
    """Live entries (queued, admitted, running; a sweep's trials each count)."""
    max_stored_bytes: int = 64 << 20
    """Bytes of the team's live specs as stored (a sweep's shared spec once)."""


def team_limits_from_mapping(raw: Any, where: str = "api: team_limits") -> TeamLimits:
    """``api: {team_limits: {max_entries, max_stored_bytes}}``."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping")
    unknown = sorted(set(raw) - {"max_entries", "max_stored_bytes"})
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    base = TeamLimits()
    values: dict[str, int] = {}
    for key in ("max_entries", "max_stored_bytes"):
        value = raw.get(key, getattr(base, key))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequest(f"{where}: {key}: must be a whole number of at least 1")
        values[key] = value
    return TeamLimits(values["max_entries"], values["max_stored_bytes"])
