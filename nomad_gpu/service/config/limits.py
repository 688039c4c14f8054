"""Limits on what the API holds at once: connection deadlines and the connection cap (enforced by
:mod:`nomad_gpu.service.http.connections`), and what one team may keep queued (enforced in the store's
transaction). Read from the config's ``api.http`` and ``api.team_limits``, with defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.confignumbers import read_numbers


@dataclass(frozen=True)
class HttpLimits:
    """How long a connection may take to send a request, and how many may be open at once
    (:mod:`nomad_gpu.service.http.connections`): idle or slow connections must not shut the API for everyone."""

    head_timeout_s: float = 10.0
    """A request's head must be complete this long after the connection opened or its previous answer."""
    body_timeout_s: float = 30.0
    """A request's body must be complete this long after its head."""
    keep_alive_s: float = 5.0
    """An idle connection after an answer is closed after this long without a byte."""
    max_connections: int = 1000
    """Open connections at most (fewer when the file-descriptor limit is lower: half of what it leaves)."""
    write_timeout_s: float = 10.0
    """An answer the client does not read (the kernel takes none of what is left of it) for this long closes
    the connection."""
    max_pipelined: int = 8
    """Requests one connection may send ahead of their answers: past it the connection is closed after the
    answer to the last one allowed (the client resends the rest on a new connection, RFC 9112 9.3.2)."""
    reserved_connections: int | None = None
    """Connections kept for requests with a valid token (or, with no token configured, ``X-Nomad-Gpu-Client``)
    when the others fill the cap; None: 10 % of ``max_connections``."""

    @property
    def reserved(self) -> int:
        """``reserved_connections``, or its default."""
        return self.max_connections // 10 if self.reserved_connections is None else self.reserved_connections


def http_limits_from_mapping(raw: Any, where: str = "api: http") -> HttpLimits:
    """``api: {http: {head_timeout_s, body_timeout_s, keep_alive_s, max_connections, write_timeout_s,
    max_pipelined, reserved_connections}}``."""
    reserved = raw.get("reserved_connections") if isinstance(raw, Mapping) else None
    numbers = {k: v for k, v in raw.items() if k != "reserved_connections"} if isinstance(raw, Mapping) else raw
    values = read_numbers(numbers, HttpLimits(reserved_connections=1), where,  # read apart below
                          lambda v: isinstance(v, int | float) and 0 < v <= 86400,
                          "must be a number above 0 (and at most 86400)")
    if values["keep_alive_s"] > values["head_timeout_s"]:
        raise InvalidRequest(f"{where}: keep_alive_s must not exceed head_timeout_s")
    most = max(1, int(values["max_connections"]))
    if reserved is not None and (isinstance(reserved, bool) or not isinstance(reserved, int)
                                 or not 0 <= reserved < most):
        raise InvalidRequest(f"{where}: reserved_connections: must be a whole number from 0 to max_connections - 1")
    return HttpLimits(head_timeout_s=float(values["head_timeout_s"]), body_timeout_s=float(values["body_timeout_s"]),
                      keep_alive_s=float(values["keep_alive_s"]), max_connections=most,
                      write_timeout_s=float(values["write_timeout_s"]),
                      max_pipelined=max(1, int(values["max_pipelined"])), reserved_connections=reserved)


@dataclass(frozen=True)
class TeamLimits:
    """What one team may hold at once: past either, a submission is answered 429 until some of it ends. And
    what it may keep, finished entries included: past either, its oldest finished entries are deleted
    (their GPU accounting kept), before ``retention_s`` if need be."""

    max_entries: int = 20_000
    """Live entries (queued, admitted, running; a sweep's trials each count)."""
    max_stored_bytes: int = 64 << 20
    """Bytes of the team's live specs as stored (a sweep's shared spec once)."""
    max_kept_entries: int = 40_000
    """Entries kept, live and finished."""
    max_kept_bytes: int = 128 << 20
    """Bytes kept of the team's entries, live and finished: specs, histories and placements as stored."""


def team_limits_from_mapping(raw: Any, where: str = "api: team_limits") -> TeamLimits:
    """``api: {team_limits: {max_entries, max_stored_bytes, max_kept_entries, max_kept_bytes}}``."""
    values = read_numbers(raw, TeamLimits(), where, lambda v: isinstance(v, int) and v >= 1,
                          "must be a whole number of at least 1")
    for kept, live in (("max_kept_entries", "max_entries"), ("max_kept_bytes", "max_stored_bytes")):
        if kept not in raw:  # unset: room for twice the live limit at least
            values[kept] = max(values[kept], 2 * values[live])
        if values[kept] < values[live]:
            raise InvalidRequest(f"{where}: {kept} ({values[kept]}) must be at least {live} ({values[live]}): "
                                 "live entries are never deleted to keep within it")
    return TeamLimits(values["max_entries"], values["max_stored_bytes"], values["max_kept_entries"],
                      values["max_kept_bytes"])
