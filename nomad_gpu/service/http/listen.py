"""Where the API listens, and the checks that keep it from listening somewhere unsafe (DESIGN 12).

Loopback without a token is for one user on one machine; any other address needs a token, or
anyone who can reach the port can submit and cancel. An ``https://`` address is served with TLS
from the configured certificate and key, or not at all: never silently plain. These are checked
before the service opens its database, so a refused start changes nothing.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import urlparse

import uvicorn
from starlette.types import ASGIApp

from nomad_gpu.defaults import DEFAULT_PORT
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.limits import HttpLimits
from nomad_gpu.service.http.browser import WILDCARDS, BrowserGuard, served_hosts
from nomad_gpu.service.http.connections import accept_backlog, connection_cap, keep_alive_seconds, limited_protocol

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenPlan:
    host: str
    port: int
    tls_cert: str | None = None
    tls_key: str | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def plan_listen(listen: str, *, token_required: bool, tls_cert: str | None = None,
                tls_key: str | None = None) -> ListenPlan:
    """Check a listen address against the token and TLS settings; InvalidRequest (one line) if unsafe."""
    url = urlparse(listen)
    if url.scheme not in ("http", "https") or not url.hostname or url.path not in ("", "/") or url.query:
        raise InvalidRequest(f"listen address {listen!r}: must be http://HOST:PORT or https://HOST:PORT")
    try:
        port = url.port if url.port is not None else DEFAULT_PORT
    except ValueError as exc:
        raise InvalidRequest(f"listen address {listen!r}: {exc}") from exc
    host = url.hostname
    if url.scheme == "https":
        if not (tls_cert and tls_key):
            raise InvalidRequest(f"listen address {listen!r} is https: give --tls-cert and --tls-key "
                                 "(refusing to serve it as plain http)")
    elif tls_cert or tls_key:
        raise InvalidRequest(f"--tls-cert/--tls-key given, but the listen address {listen!r} is http; "
                             "use an https:// address")
    if not token_required and not is_loopback(host):
        raise InvalidRequest(f"refusing to listen on {host} without a token: set NOMAD_GPU_TOKEN or api.tokens "
                             "in the config (only a loopback address may go without)")
    return ListenPlan(host, port, tls_cert if url.scheme == "https" else None,
                      tls_key if url.scheme == "https" else None)


class ApiServer:
    """Uvicorn in a thread on a socket bound here (so port 0 works and start-up errors surface here)."""

    def __init__(self, app: ASGIApp, plan: ListenPlan, *, hosts: frozenset[str] = frozenset(),
                 limits: HttpLimits | None = None, tokens: Collection[str] = ()) -> None:
        """``hosts``: names besides loopback (and the listen address) that requests may name in ``Host``;
        ``limits``: connection deadlines and cap (:mod:`nomad_gpu.service.http.connections`); ``tokens``: the
        API's tokens, whose requests may use the connections kept in reserve."""
        self.app = BrowserGuard(app, served_hosts(plan.host, hosts))
        self.plan = plan
        self.limits = limits or HttpLimits()
        self.tokens = tuple(tokens)
        self.protocol = limited_protocol(self.limits, connection_cap(self.limits), self.tokens)
        if plan.host.lower() in WILDCARDS and not hosts:
            logger.warning("listening on %s with no api.hosts: only requests to a loopback name are answered; "
                           "list the names clients use in api.hosts", plan.host)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    def retrust(self, tokens: Collection[str]) -> None:
        """The tokens whose requests may use the reserved connections, after a config reload: one class
        attribute each, swapped whole (a connection judged meanwhile sees the old set or the new one)."""
        self.tokens = tuple(tokens)
        self.protocol.retrust(self.tokens)

    def bind(self) -> None:
        """Load the TLS context and bind the port: every start-up error of the API surfaces here."""
        plan = self.plan
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                ssl_certfile=plan.tls_cert, ssl_keyfile=plan.tls_key,
                                http=self.protocol,
                                timeout_keep_alive=keep_alive_seconds(self.limits), backlog=accept_backlog())
        try:
            config.load()  # builds the TLS context now: a bad certificate or key is an error here
        except (OSError, ssl.SSLError) as exc:
            raise InvalidRequest(f"TLS certificate or key: {getattr(exc, 'strerror', None) or exc}") from exc
        # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only then, and without
        # it every keep-alive response waits ~40 ms on Nagle + delayed ACK
        sock = socket.socket(socket.AF_INET6 if ":" in plan.host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((plan.host, plan.port))
        except OSError as exc:
            sock.close()
            raise InvalidRequest(f"cannot listen on {plan.host}:{plan.port}: {exc.strerror or exc}") from exc
        self._socket = sock
        self._server = uvicorn.Server(config)

    def serve(self, ready_timeout_s: float = 10.0) -> str:
        """Serve in a thread (binding first if needed); returns the address, with the bound port."""
        if self._server is None or self._socket is None:
            self.bind()
        assert self._server is not None and self._socket is not None
        port = self._socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, name="api",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + ready_timeout_s
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        host = f"[{self.plan.host}]" if ":" in self.plan.host else self.plan.host
        return f"{self.plan.scheme}://{host}:{port}"

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
