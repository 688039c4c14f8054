"""How the client reaches Nomad: settings from Nomad's own variables, the TLS server name, the proxy.

Kept apart from the calls (:mod:`nomad_gpu.nomad.client`) because the entry points build settings long
before any call is made, and what they read (NOMAD_ADDR, NOMAD_CACERT, NOMAD_SKIP_VERIFY, ...) is fixed
here once (reference/nomad-api.md sections 9 and 10). The token is held, never printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter

_TRUE = {"1", "t", "true", "yes", "on"}


@dataclass(frozen=True)
class NomadSettings:
    address: str = "http://127.0.0.1:4646"
    token: str | None = None
    namespace: str | None = None
    region: str | None = None
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    skip_verify: bool = False
    tls_server_name: str | None = None
    timeout_s: float = 10.0
    watch_namespace: str = "*"
    """The namespace(s) the event stream and the allocation list cover: `*`, every namespace (so GPUs held
    in any of them count, and every namespace the service submits to is seen), one name, or several,
    comma-separated (one stream each: for a token that may not read every namespace, as Nomad checks
    `read-job` in every namespace `*` expands to, `nomad/event_endpoint.go` `validateACL`, v2.0.5)."""

    @staticmethod
    def from_env(env: Mapping[str, str]) -> NomadSettings:
        """Nomad's own variables (reference section 9); read once, at the entry point."""
        return NomadSettings(
            address=env.get("NOMAD_ADDR") or "http://127.0.0.1:4646",
            token=env.get("NOMAD_TOKEN") or None,
            namespace=env.get("NOMAD_NAMESPACE") or None,
            region=env.get("NOMAD_REGION") or None,
            ca_cert=env.get("NOMAD_CACERT") or None,
            client_cert=env.get("NOMAD_CLIENT_CERT") or None,
            client_key=env.get("NOMAD_CLIENT_KEY") or None,
            skip_verify=(env.get("NOMAD_SKIP_VERIFY") or "").strip().lower() in _TRUE,
            tls_server_name=env.get("NOMAD_TLS_SERVER_NAME") or None,
            watch_namespace=(env.get("NOMAD_GPU_WATCH_NAMESPACES") or "*").strip() or "*",
        )

    @property
    def watched(self) -> tuple[str, ...]:
        """`watch_namespace` as a list: ("*",), or the names, each once."""
        names = tuple(dict.fromkeys(n.strip() for n in self.watch_namespace.split(",") if n.strip()))
        return ("*",) if not names or "*" in names else names

    @property
    def verify(self) -> bool | str:
        if self.skip_verify:
            return False
        return self.ca_cert or True

    def __repr__(self) -> str:  # never print the token
        return f"NomadSettings(address={self.address!r}, namespace={self.namespace!r}, region={self.region!r})"


class ServerNameAdapter(HTTPAdapter):
    """Checks the certificate against NOMAD_TLS_SERVER_NAME instead of the address's host."""

    def __init__(self, server_name: str) -> None:
        self._server_name = server_name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["server_hostname"] = self._server_name
        kwargs["assert_hostname"] = self._server_name
        super().init_poolmanager(*args, **kwargs)


def environment_read_once(address: str) -> requests.Session:
    """A session whose proxy for Nomad's address is read from the environment once, here.

    requests re-reads the environment on every call (HTTP(S)_PROXY, NO_PROXY, the CA bundle variables,
    ~netrc): a sixth of a register's CPU. Go's `http.ProxyFromEnvironment`, which Nomad's own API client
    uses, also reads the environment once per process (net/http/transport.go), so this is what users of
    Nomad's tools already get. TLS settings come from NomadSettings, never from requests' variables.
    """
    session = requests.Session()
    session.proxies.update(requests.utils.get_environ_proxies(address))
    session.trust_env = False
    return session
