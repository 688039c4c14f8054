"""Who is calling the API, and what of the queue they may see (DESIGN 12).

A request carries a token (``Authorization: Bearer`` or ``X-Nomad-Gpu-Token``); the token names a
team, or is an admin token. A team's caller sees, submits and cancels only its own team's entries:
another team's entry does not exist for it (404, the same words as for an unknown ID), so neither
its name nor its spec (with its env values) ever leaves the service. Views that every team shares
(status, metrics) keep the totals but fold every other team into ``another team``. Where the operator
opens ``/metrics`` to scrapers without a token, a scrape that sends none sees every team folded into
``_all`` (``metrics_open_teams`` shows them); one that sends a token is that token's caller. The scheduler
and the store know nothing of callers: the API filters what they return.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from starlette.types import ASGIApp, Receive, Scope, Send

from nomad_gpu.service.config.settings import OPEN_GRANT, AccessSettings, Grant
from nomad_gpu.service.ui import is_ui_path
from nomad_gpu.store import QueueEntry

OTHER_TEAM = "another team"
"""What a team's caller sees in place of any other team's name."""
ALL_TEAMS = "_all"
"""What a scrape of open metrics without a token sees in place of every team (no team starts with `_`)."""
ANONYMOUS_TEAM = "_anonymous"
"""The team of a caller without a token on open metrics: no entry has it, and it is never `None` (the admin)."""
CALLER_KEY = "nomad_gpu.caller"
"""Where the gate leaves the caller in the ASGI scope."""


@dataclass(frozen=True)
class Caller:
    """The caller of one request: ``team`` None is the admin (or no token is configured); ANONYMOUS_TEAM a
    scrape of open metrics that sent no token."""

    team: str | None = None
    grant: Grant = OPEN_GRANT
    """Where this token's submissions may go, within the service-wide lists."""
    user: str | None = None
    """The person the token belongs to (`api.tokens` `user:`), recorded on what it submits."""

    @property
    def admin(self) -> bool:
        return self.team is None

    @property
    def anonymous(self) -> bool:
        return self.team == ANONYMOUS_TEAM

    def sees(self, entry: QueueEntry) -> bool:
        return self.team is None or entry.team == self.team

    def visible(self, entries: Iterable[QueueEntry]) -> list[QueueEntry]:
        return [e for e in entries if self.sees(e)]

    def team_name(self, team: str) -> str:
        """A team as this caller may see it: its own, a non-team account (``_nomad``), or OTHER_TEAM; to an
        anonymous caller every one is ALL_TEAMS."""
        if self.anonymous:
            return ALL_TEAMS
        if self.team is None or team == self.team or team.startswith("_"):
            return team
        return OTHER_TEAM


ADMIN = Caller()
ANONYMOUS = Caller(ANONYMOUS_TEAM)


def caller_of(scope: Scope) -> Caller:
    caller = scope.get(CALLER_KEY)
    return caller if isinstance(caller, Caller) else ADMIN


Grants = tuple[tuple[bytes, "str | None", Grant, "str | None"], ...]


class LiveTokens:
    """The tokens the gate knows, swapped whole on a config reload (service/loops/reload.py): a request sees the
    old set or the new one, never a mix (one attribute holds both the settings and their digests)."""

    def __init__(self, access: AccessSettings) -> None:
        self.state: tuple[AccessSettings, Grants] = (access, self._digests(access))

    def swap(self, access: AccessSettings) -> None:
        self.state = (access, self._digests(access))

    @property
    def access(self) -> AccessSettings:
        return self.state[0]

    @staticmethod
    def _digests(access: AccessSettings) -> Grants:
        # compare digests, not tokens: equal lengths, and every token is compared on every request
        return tuple((hashlib.sha256(t.encode()).digest(), team, access.grants.get(t, OPEN_GRANT), access.users.get(t))
                     for t, team in access.tokens.items())


class TokenGate:
    """ASGI middleware: 401 without a known token (when any is configured), else the caller in the scope."""

    def __init__(self, app: ASGIApp, access: AccessSettings, live: LiveTokens | None = None) -> None:
        self.app = app
        self.live = live or LiveTokens(access)

    @property
    def access(self) -> AccessSettings:
        return self.live.access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        caller: Caller | None = ADMIN
        access, grants = self.live.state
        # the dashboard's static files hold no data: its API calls carry the token
        if access.required and not is_ui_path(str(scope.get("path", ""))):
            token = _token(scope)
            if not token and scope.get("path") == "/metrics" and access.metrics_open:
                caller = ANONYMOUS  # a scraper without a token; one that sends a token is that token's caller
            else:
                caller = self.resolve(token, grants)
        if caller is None:
            refusal = "missing or wrong token (set NOMAD_GPU_TOKEN)"
            body = json.dumps({"error": refusal, "errors": [refusal]}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        scope[CALLER_KEY] = caller
        await self.app(scope, receive, send)

    def resolve(self, token: str | None, grants: Grants | None = None) -> Caller | None:
        if not token:
            return None
        given = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Caller | None = None
        for digest, team, grant, user in (grants if grants is not None else self.live.state[1]):
            if hmac.compare_digest(given, digest):
                found = Caller(team, grant, user)
        return found


def _token(scope: Scope) -> str | None:
    headers: Mapping[bytes, bytes] = dict(scope.get("headers") or [])
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    given = headers.get(b"x-nomad-gpu-token")
    return given.decode("latin-1") if given else None


def status_view(status: Mapping[str, Any], caller: Caller, teams_of: Mapping[str, str]) -> dict[str, Any]:
    """The service status for ``caller``: other teams' usage summed, their held entries unnamed.

    ``teams_of`` maps the entry IDs in ``holds`` and ``grace_warnings`` to their teams.
    """
    out = dict(status)
    if caller.admin:
        return out
    if out.get("last_cycle_error"):  # it may name another team's entry: teams see only that cycles fail
        out["last_cycle_error"] = "a scheduling cycle failed (the admin sees why)"
    for field_name in ("team_usage_gpu", "team_borrowed_gpu"):
        if isinstance(status.get(field_name), Mapping):
            usage: dict[str, float] = {}
            for team, value in status[field_name].items():
                key = caller.team_name(str(team))
                usage[key] = usage.get(key, 0.0) + float(value)
            out[field_name] = usage
    if isinstance(status.get("holds"), Mapping):
        holds: dict[str, list[str]] = {}
        for entry_id, nodes in status["holds"].items():
            key = entry_id if teams_of.get(entry_id) == caller.team else OTHER_TEAM
            holds[key] = sorted({*holds.get(key, []), *nodes})
        out["holds"] = holds
    if isinstance(status.get("preemptions"), list):  # a preemption is within one team: the preemptor's
        out["preemptions"] = [p for p in status["preemptions"] if teams_of.get(str(p.get("preemptor"))) == caller.team]
    if isinstance(status.get("grace_warnings"), Mapping):
        out["grace_warnings"] = {e: w for e, w in status["grace_warnings"].items() if teams_of.get(e) == caller.team}
    return out


def metrics_view(registry: CollectorRegistry, caller: Caller, *, show_teams: bool = False) -> bytes:
    """Prometheus text for ``caller``: series labelled with another team are summed under OTHER_TEAM, every
    team under ALL_TEAMS for an anonymous caller unless ``show_teams`` (``metrics_open_teams``)."""
    if caller.admin or (caller.anonymous and show_teams):
        return generate_latest(registry)
    view = CollectorRegistry(auto_describe=False)
    view.register(_TeamFold(registry, caller))
    return generate_latest(view)


class _TeamFold:
    def __init__(self, registry: CollectorRegistry, caller: Caller) -> None:
        self.registry = registry
        self.caller = caller

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            folded: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
            for s in family.samples:
                labels = dict(s.labels)
                if "team" in labels:
                    labels["team"] = self.caller.team_name(labels["team"])
                key = (s.name, tuple(sorted(labels.items())))
                prior = folded.get(key)
                value = s.value + (prior.value if prior is not None else 0.0)
                folded[key] = Sample(s.name, labels, value, s.timestamp, s.exemplar)
            family.samples = list(folded.values())
            yield family
