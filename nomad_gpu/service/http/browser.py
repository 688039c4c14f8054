"""What keeps a web page the user happens to open from driving the service (DESIGN 12).

On loopback the API may run without tokens (``nomad-gpu dev``; ``serve`` for one user). A browser
will send a page's requests there: a "simple" cross-origin POST (``text/plain``, a typeless body, a
form) needs no preflight, and a name the page's owner rebinds to 127.0.0.1 makes every answer
readable to that page. So, before any route runs:

* the ``Host`` must be a loopback name (``localhost``, a loopback IP literal; any port, so SSH tunnels
  work) or a name the operator listed (``api.hosts``), or the address the service listens on: a
  rebound name is answered 421 and nothing else;
* a state change (any method but GET and HEAD) with a body must declare JSON or YAML, which a browser
  sends cross-site only after a preflight: 415 otherwise;
* a bodiless POST (hold, release, requeue, ...) must carry ``X-Nomad-Gpu-Client`` (any value) or a token
  header (``X-Nomad-Gpu-Token``, ``Authorization: Bearer``), headers a page can set only after a preflight
  too: 403 otherwise. POST is the one state-changing method a page sends cross-site without a preflight
  (a CORS-safelisted method, Fetch standard); DELETE, PUT and PATCH need one, so ``curl -X DELETE`` on
  loopback needs no such header;
* a state change whose ``Origin`` is not one of the hosts above is refused (403), whatever it carries;
* a request with both ``Content-Length`` and ``Transfer-Encoding`` is refused (400) and its connection
  closed, like every refusal here: the bytes after its body are never read as another request.

The service never answers a preflight (no route takes OPTIONS, no CORS header is ever sent), so the
requests that need one never arrive from another site. The CLI and the dashboard send the header.
"""

from __future__ import annotations

import ipaddress
import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

CLIENT_HEADER = "X-Nomad-Gpu-Client"
"""The header every state change without a body carries; its value (``cli``, ``dashboard``) is free."""
LOOPBACK_NAMES = frozenset({"localhost"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
JSON_OR_YAML = frozenset({"application/json", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_NO_PREFLIGHT = "POST"
"""The one CORS-safelisted method that changes state: a page sends it cross-site without asking first."""


def host_name(authority: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower case; None if malformed."""
    value = authority.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1:] and not _is_port(value[end + 1:])):
            return None
        return value[1:end]
    name, colon, port = value.partition(":")
    if colon and not port.isdigit():
        return None
    return name or None


def _is_port(rest: str) -> bool:
    return rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit()


def is_loopback_name(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def served_hosts(listen_host: str, configured: frozenset[str]) -> frozenset[str]:
    """The names answered besides loopback: the configured ones and a listen address that is not a wildcard."""
    names = {h.lower() for h in configured}
    if listen_host.lower() not in WILDCARDS:
        names.add(listen_host.lower().strip("[]"))
    return frozenset(names)


class BrowserGuard:
    """ASGI middleware applying the rules of this module to every HTTP request."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)

    def allowed(self, name: str | None) -> bool:
        return name is not None and (is_loopback_name(name) or name in self.hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        body = json.dumps({"error": message}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """The status and message refusing this request, or None to serve it."""
        headers: dict[str, str] = {}
        for key, value in scope.get("headers") or []:
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        if "content-length" in headers and "transfer-encoding" in headers:
            # the two disagree on where the body ends: what follows it could be read as another request
            return 400, "a request may give Content-Length or Transfer-Encoding, not both"
        host = headers.get("host")
        if host is None or not self.allowed(host_name(host)):
            return 421, (f"this service does not answer for the host {(host or '')[:100]!r}: use localhost, or add "
                         "the name to api.hosts in the service config")
        method = str(scope.get("method", "GET")).upper()
        if method in _SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is not None and not self.allowed(_origin_host(origin)):
            return 403, f"a state change from the origin {origin[:100]!r} is refused (a web page cannot drive this API)"
        if _has_body(headers):
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media not in JSON_OR_YAML and not media.endswith(("+json", "+yaml")):
                return 415, (f"Content-Type {media or '(none)'!r}: send the body as application/json or "
                             "application/yaml")
            return None
        if method != _NO_PREFLIGHT:  # a page must ask first, and no preflight is ever granted
            return None
        if CLIENT_HEADER.lower() in headers or "x-nomad-gpu-token" in headers or \
                headers.get("authorization", "")[:7].lower() == "bearer ":
            return None
        return 403, (f"{method} without a body needs the header {CLIENT_HEADER} (any value) or a token header: "
                     "a web page cannot send it from another site")


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length", "").strip()
    return "transfer-encoding" in headers or (bool(length) and length != "0")


def _origin_host(origin: str) -> str | None:
    try:
        parts = urlsplit(origin.strip())
        return parts.hostname if parts.scheme in ("http", "https") else None
    except ValueError:
        return None
