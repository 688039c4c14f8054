"""Which connection gives way when the API's connections are full, and whose requests may use the reserve.

Pure choices for :mod:`nomad_gpu.service.http.connections`, kept apart so that the fast tests see them. A connection
is *fresh* until its first request head, then *trusted* or *untrusted* by its latest head: trusted when it
carries a valid token (``Authorization: Bearer`` or ``X-Nomad-Gpu-Token``, checked against the digests of the
configured tokens, so a wrong token is as good as none), or, on a service with no token configured (loopback,
one user), ``X-Nomad-Gpu-Client``, which the CLI and the dashboard's API calls send and a page load does not.
Anyone may send that header; with no token there is nothing better to tell a client by.

At the cap a connection that is not in the middle of a request may be closed to make room: one waiting for a
request head, or one whose answer the client does not read (its writes are blocked). Untrusted ones go
first, then fresh ones, trusted ones last; within each, blocked before waiting, and the longest-standing first;
an untrusted newcomer never takes a trusted connection's place. Untrusted connections may hold at most
``cap - reserve``: the rest is kept for trusted requests.

A connection is accepted a turn of the event loop before its head is read, and a burst of new connections
is accepted in one turn: judged only by what was read, a trusted client in such a burst would be as likely
as any to be closed by the ones after it. So a new connection is first judged by the head already waiting
in its socket, peeked at without reading it (:func:`head_fields`), when there is a whole one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from nomad_gpu.service.config.limits import HttpLimits

T = TypeVar("T")


class Trust(Enum):
    """What the latest request head on a connection showed; the value is the order in which they give way."""

    UNTRUSTED = 0
    FRESH = 1
    TRUSTED = 2


@dataclass(frozen=True)
class Standing:
    """One open connection as the choice sees it (times on one monotonic clock)."""

    trust: Trust
    waiting_since: float | None = None
    """Since when it has waited for a request head; None while a request is in progress."""
    blocked_since: float | None = None
    """Since when its writes have been blocked (the client reads none of its answer); None while they flow."""

    @property
    def evictable(self) -> bool:
        return self.waiting_since is not None or self.blocked_since is not None


ANY = frozenset(Trust)
BELOW_TRUSTED = frozenset({Trust.UNTRUSTED, Trust.FRESH})
UNTRUSTED_ONLY = frozenset({Trust.UNTRUSTED})


def room_for(newcomer: Trust) -> frozenset[Trust]:
    """Whose connections a newcomer judged ``newcomer`` may close to get in."""
    return BELOW_TRUSTED if newcomer is Trust.UNTRUSTED else ANY


def pick_eviction(candidates: Iterable[tuple[T, Standing]], within: frozenset[Trust] = ANY) -> T | None:
    """The connection to close to make room (one of ``within``), or None when none may give way."""
    best: tuple[tuple[int, int, float], T] | None = None
    for item, standing in candidates:
        if not standing.evictable or standing.trust not in within:
            continue
        blocked = standing.blocked_since is not None
        since = standing.blocked_since if standing.blocked_since is not None else standing.waiting_since
        key = (standing.trust.value, 0 if blocked else 1, since if since is not None else 0.0)
        if best is None or key < best[0]:
            best = (key, item)
    return None if best is None else best[1]


def reserve_for(limits: HttpLimits, cap: int) -> int:
    """The connections kept for trusted requests under ``cap``: the configured share of ``max_connections``
    (the cap is lower when the file-descriptor limit is), always leaving untrusted requests one."""
    share = limits.reserved * cap // max(1, limits.max_connections)
    return max(0, min(share, cap - 1))


def untrusted_fits(untrusted: int, cap: int, reserve: int) -> bool:
    """Whether ``untrusted`` connections (the newcomer counted) stay out of the reserve."""
    return untrusted <= cap - reserve


def token_digests(tokens: Collection[str]) -> frozenset[bytes]:
    return frozenset(_digest(t) for t in tokens)


def trust_of(headers: Iterable[tuple[bytes, bytes]], digests: frozenset[bytes]) -> Trust:
    """A request head's trust (``headers`` as the ASGI scope has them: names in lower case)."""
    token: bytes | None = None
    client = False
    for name, value in headers:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            token = value[7:].strip()
        elif name == b"x-nomad-gpu-token" and token is None:
            token = value
        elif name == b"x-nomad-gpu-client":
            client = True
    if digests:
        return Trust.TRUSTED if token and _digest(token.decode("latin-1")) in digests else Trust.UNTRUSTED
    return Trust.TRUSTED if client else Trust.UNTRUSTED


def head_fields(data: bytes) -> list[tuple[bytes, bytes]] | None:
    """The header fields of the request head that ``data`` starts with (names in lower case, as the ASGI scope
    has them), or None when ``data`` holds no whole head. Only a preview: the real parse is h11's."""
    head, end, _ = data.partition(b"\r\n\r\n")
    if not end:
        return None
    fields = []
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon:
            fields.append((name.strip().lower(), value.strip()))
    return fields


def _digest(token: str) -> bytes:
    # the token gate's digest (service/admission/access.py), so a header decoded the same way matches the same token
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
