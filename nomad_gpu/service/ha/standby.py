"""A standby replica's API: its own status, metrics and dashboard; every other request forwarded to the leader.

Only the leader holds the queue's live state (the ledger, each attempt's record, what is on the wire to
Nomad), so a standby answering from the database alone would show a stale queue and could not cancel a
running job without writing to Nomad. It forwards instead, as Nomad's own servers forward an RPC to the
leader (`nomad/rpc.go` `forward`, v2.0.5): the caller may reach any replica. The standby checks the caller's
token first with the same gate the leader runs (the same config), so a request it forwards is one the leader
would have let in; the leader checks it again. While no replica leads (the seconds of a takeover), or the
leader does not answer, the answer is 503 with Retry-After: a submission retried with its Idempotency-Key
is stored once.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import Any

import requests
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nomad_gpu.api.payloads import Status
from nomad_gpu.render.loading import MAX_SPEC_BYTES
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.admission.access import LiveTokens, TokenGate, caller_of, metrics_view
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.http.httpkit import Contained, error, read_body
from nomad_gpu.service.ui import ui_routes

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 60.0
"""A forwarded request's limits (a large sweep's submission takes seconds on the leader)."""
_NOT_FORWARDED = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                            "transfer-encoding", "upgrade", "host", "content-length", "content-encoding"})
"""Hop-by-hop headers (RFC 9110 7.6.1), and those the forwarding library sets itself."""
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]


def standby_app(leader: Callable[[], str], ha_status: Callable[[], dict[str, Any]], metrics: Metrics,
                access: AccessSettings, live_tokens: LiveTokens | None = None) -> Starlette:
    """``leader()``: the leader's API address (empty while nobody leads); ``ha_status()``: this replica's role,
    epoch and the leader's address, for its status."""
    session = requests.Session()
    session.trust_env = False  # a proxy from the environment must not sit between two replicas
    # a leader serving https is verified against this node's system CAs (where an operator adds a private CA,
    # as for Nomad's own checks: docs/deploy.md), not against the CA bundle requests ships
    trusted = ssl.get_default_verify_paths()
    session.verify = trusted.cafile or trusted.capath or True

    async def status(request: Request) -> Response:
        return JSONResponse(Status(ready=False, nomad_reachable=False, **ha_status()).to_json())

    async def scrape(request: Request) -> Response:
        text = await run_in_threadpool(lambda: metrics_view(metrics.registry, caller_of(request.scope),
                                                            show_teams=access.metrics_open_teams))
        return Response(text, media_type="text/plain; version=0.0.4")

    async def forward(request: Request) -> Response:
        target = leader().rstrip("/")
        if not target:
            return error(503, "no replica leads right now (a takeover is under way); retry")
        body = await read_body(request, MAX_SPEC_BYTES, "request")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        url = target + request.url.path + (f"?{request.url.query}" if request.url.query else "")

        def send() -> requests.Response:
            return session.request(request.method, url, headers=headers, data=body or None, allow_redirects=False,
                                   timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))

        try:
            reply = await run_in_threadpool(send)
        except requests.RequestException as exc:
            logger.warning("forwarding %s %s to the leader %s failed: %s", request.method, request.url.path,
                           target, type(exc).__name__)
            return error(503, "the leader does not answer (a takeover may be under way); retry")
        kept = {k: v for k, v in reply.headers.items() if k.lower() not in _NOT_FORWARDED}
        return Response(reply.content, status_code=reply.status_code, headers=kept)

    routes = [Route("/v1/status", status, methods=["GET"]), Route("/metrics", scrape, methods=["GET"]),
              *ui_routes(), Route("/{path:path}", forward, methods=METHODS)]
    return Starlette(routes=routes, middleware=[Middleware(Contained), Middleware(TokenGate, access=access,
                                                                                  live=live_tokens)])


class Switch:
    """The ASGI app the listener serves: the standby's until this replica leads, then the leader's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
