"""The context of nomad-gpu's own Nomad job (``templates/nomad-gpu.hcl.j2``).

An operator deploys the service with ``nomad job run`` on the file ``nomad-gpu deploy render``
writes. That file is visible to anyone who may read the job (the UI's Definition tab), so it
carries no secret: the config file (with the team tokens), the service's Nomad token, the health
check's token and every TLS file come from one Nomad Variable through ``template`` blocks that
Nomad's client renders into the task's private ``secrets/`` directory when the task starts. What
this module writes into those templates is the Variable's path and item names, never a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nomad_gpu.render.devices import ENV_VISIBLE_DEVICES, NO_GPU
from nomad_gpu.render.hcl import RenderError

__all__ = [
    "DRIVERS",
    "ITEM_CHECK_TOKEN",
    "ITEM_CONFIG",
    "ITEM_DB_URL",
    "ITEM_NOMAD_CA",
    "ITEM_NOMAD_CLIENT_CERT",
    "ITEM_NOMAD_CLIENT_KEY",
    "ITEM_NOMAD_TOKEN",
    "ITEM_TLS_CERT",
    "ITEM_TLS_KEY",
    "PORT_LABEL",
    "PROVIDERS",
    "ServiceJobSettings",
    "check_variable_path",
    "service_job_context",
]

DRIVERS = ("docker", "exec", "raw_exec")
PROVIDERS = ("nomad", "consul")
PORT_LABEL = "api"
"""The group network's port the service listens on (``NOMAD_ADDR_api`` in the task)."""

# The items of the Nomad Variable (`nomad var put <path> config=@config.yaml ...`).
ITEM_CONFIG = "config"
ITEM_NOMAD_TOKEN = "nomad_token"
ITEM_CHECK_TOKEN = "check_token"
ITEM_TLS_CERT = "tls_cert"
ITEM_TLS_KEY = "tls_key"
ITEM_NOMAD_CA = "nomad_ca_cert"
ITEM_NOMAD_CLIENT_CERT = "nomad_client_cert"
ITEM_NOMAD_CLIENT_KEY = "nomad_client_key"
ITEM_DB_URL = "db_url"
"""The replicas' PostgreSQL URL, password included (`NOMAD_GPU_DB` in the task; never on the command line)."""

CHECK_TOKEN_ENV = "NOMAD_GPU_CHECK_TOKEN"
"""The env var the health check's header reads (Nomad interpolates check headers with the task's
environment, template env included: `client/taskenv/services.go` InterpolateService, v2.0.5)."""

# `nomad/structs/variables.go` (v2.0.5): validVariablePath, and `nomad` alone is reserved.
_VARIABLE_PATH = re.compile(r"[a-zA-Z0-9\-_~/]{1,128}")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ServiceJobSettings:
    """What the nomad-gpu service job needs; secrets (NOMAD_TOKEN) never belong in ``env``.

    The defaults render the bare job (no port, no Variable); ``nomad-gpu deploy render`` fills in
    the deployable one: a port, a Variable, TLS and a health check."""

    image: str
    env: Mapping[str, str] = field(default_factory=lambda: {"NOMAD_ADDR": "http://127.0.0.1:4646"})
    job_id: str = "nomad-gpu"
    priority: int = 80
    datacenters: tuple[str, ...] = ("*",)
    namespace: str = "default"
    node_pool: str | None = None
    driver: str = "docker"
    command: str = "nomad-gpu"
    args: tuple[str, ...] = ("serve",)
    cpu: int = 500
    memory: int = 512
    host_volume: str = "nomad-gpu"
    """The client's host volume that keeps the queue database across restarts and reschedules."""
    data_dir: str = "/var/lib/nomad-gpu"
    """Where the task sees the host volume (with raw_exec, which mounts nothing: the volume's path on the node)."""
    port: int | None = None
    """The port of the group network the service listens on: 0 dynamic, else static; None: no network
    (nor listen address, nor service registration)."""
    variable: str | None = None
    """The Nomad Variable the config, tokens and TLS files come from; None: no templates."""
    tls: bool = False
    """Serve https with the Variable's ``tls_cert``/``tls_key`` (needs ``variable``)."""
    nomad_ca: bool = False
    """Verify Nomad with the Variable's ``nomad_ca_cert`` (NOMAD_CACERT)."""
    nomad_client_cert: bool = False
    """Present the Variable's ``nomad_client_cert``/``nomad_client_key`` to Nomad (verify_https_client)."""
    service_name: str | None = None
    """Register the service under this name with a health check on /v1/status (needs ``port``)."""
    service_provider: str = "nomad"
    check_interval: str = "10s"
    check_timeout: str = "3s"
    replicas: int = 1
    """Above 1, the high-availability form: that many replicas on distinct nodes sharing a PostgreSQL queue whose
    URL is the Variable's ``db_url`` (docs/reliability.md); no host volume. 1: one service, SQLite on the volume."""
    check_tls_skip_verify: bool = True
    """Consul's check skips verifying the service's certificate (a private CA's); Nomad's own checks cannot:
    they trust the node's system CAs only, so the certificate's CA must be there."""


def check_variable_path(path: str) -> str:
    """A path Nomad accepts for a Variable (`validatePath`, nomad/structs/variables.go, v2.0.5)."""
    if not _VARIABLE_PATH.fullmatch(path) or path == "nomad" or path.startswith("/") or "//" in path:
        raise RenderError(f"invalid Nomad Variable path {path!r} (1-128 of a-z, A-Z, 0-9, '-', '_', '~', '/'; "
                          "not 'nomad' itself)")
    return path


def service_job_context(settings: ServiceJobSettings) -> dict[str, Any]:
    """The plain dict ``templates/nomad-gpu.hcl.j2`` sees as ``service``."""
    _check(settings)
    config: dict[str, Any] = {"image": settings.image, "command": settings.command}
    if settings.driver != "docker":
        del config["image"]
    if settings.driver == "docker":
        config["network_mode"] = "host"  # the task binds the node's address the network block reserved
    return {
        "job_id": settings.job_id,
        "priority": settings.priority,
        "datacenters": list(settings.datacenters),
        "namespace": settings.namespace,
        "node_pool": settings.node_pool,
        "driver": settings.driver,
        "config": config,
        "args": list(settings.args),
        "db": f"{settings.data_dir.rstrip('/')}/queue.db" if settings.replicas == 1 else None,
        "replicas": settings.replicas,
        "env": {ENV_VISIBLE_DEVICES: NO_GPU, **settings.env},  # the service itself needs no GPU
        "nomad_ca": settings.nomad_ca,  # the template names the files under ${NOMAD_SECRETS_DIR}
        "nomad_client_cert": settings.nomad_client_cert,
        "cpu": settings.cpu,
        "memory": settings.memory,
        "host_volume": settings.host_volume,
        "data_dir": settings.data_dir,
        # raw_exec mounts nothing (its driver offers no mount configs): the group's volume still places the
        # job on a node that has it, and data_dir is then the volume's path on that node
        "mount": settings.driver != "raw_exec",
        "port": settings.port,
        "port_label": PORT_LABEL,
        "scheme": "https" if settings.tls else "http",
        "config_file": settings.variable is not None,
        "tls": settings.tls,
        "templates": _templates(settings),
        "service_name": settings.service_name,
        "provider": settings.service_provider,
        "check": {"interval": settings.check_interval, "timeout": settings.check_timeout,
                  "protocol": "https" if settings.tls else "http",
                  # Nomad's own checks always verify against the node's system CAs and refuse the field
                  # ("tls_skip_verify may only be set for Consul service checks": ServiceCheck.validateNomad,
                  # nomad/structs/services.go; client/serviceregistration/checks/client.go; v2.0.5)
                  "tls_skip_verify": (settings.check_tls_skip_verify and settings.tls
                                      and settings.service_provider == "consul")},
        "check_header": settings.variable is not None,
    }


def _templates(settings: ServiceJobSettings) -> list[dict[str, Any]]:
    """One ``template`` per file, each reading items of the Variable (never their values)."""
    path = settings.variable
    if path is None:
        return []
    files = [("config.yaml", ITEM_CONFIG)]
    if settings.tls:
        files += [("tls-cert.pem", ITEM_TLS_CERT), ("tls-key.pem", ITEM_TLS_KEY)]
    if settings.nomad_ca:
        files.append(("nomad-ca.pem", ITEM_NOMAD_CA))
    if settings.nomad_client_cert:
        files += [("nomad-client.pem", ITEM_NOMAD_CLIENT_CERT), ("nomad-client-key.pem", ITEM_NOMAD_CLIENT_KEY)]
    out = [{"destination": f"secrets/{name}", "data": _item(path, item), "env": False} for name, item in files]
    env_lines = f"NOMAD_TOKEN={{{{ .{ITEM_NOMAD_TOKEN} }}}}\n"
    if settings.replicas > 1:
        env_lines += f"NOMAD_GPU_DB={{{{ .{ITEM_DB_URL} }}}}\n"
    if settings.service_name is not None:
        env_lines += f"{CHECK_TOKEN_ENV}={{{{ .{ITEM_CHECK_TOKEN} }}}}\n"
    out.append({"destination": "secrets/nomad-gpu.env", "env": True,
                "data": f'{{{{ with nomadVar "{path}" }}}}\n{env_lines}{{{{ end }}}}\n'})
    return out


def _item(path: str, item: str) -> str:
    # The path is checked (no quote, brace or backslash can reach the Go template's string literal).
    return f'{{{{ with nomadVar "{path}" }}}}{{{{ .{item} }}}}{{{{ end }}}}'


def _check(settings: ServiceJobSettings) -> None:
    if settings.driver not in DRIVERS:
        raise RenderError(f"driver {settings.driver!r}: must be one of {', '.join(DRIVERS)}")
    if settings.service_provider not in PROVIDERS:
        raise RenderError(f"service provider {settings.service_provider!r}: must be one of {', '.join(PROVIDERS)}")
    if settings.port is not None and not 0 <= settings.port <= 65535:
        raise RenderError(f"port {settings.port}: must be from 0 (dynamic) to 65535")
    if settings.variable is not None:
        check_variable_path(settings.variable)
    elif settings.tls or settings.nomad_ca or settings.nomad_client_cert:
        raise RenderError("TLS files come from a Nomad Variable: give its path")
    if not 1 <= settings.replicas <= 7:
        raise RenderError(f"replicas {settings.replicas}: must be from 1 to 7 (2 or 3 is the usual)")
    if settings.replicas > 1 and settings.variable is None:
        raise RenderError("replicas share a PostgreSQL queue whose URL comes from a Nomad Variable (db_url): "
                          "give its path")
    if settings.service_name is not None and settings.port is None:
        raise RenderError("a service registration needs the port the service listens on")
    for key in settings.env:
        if not _ENV_NAME.fullmatch(key):
            raise RenderError(f"env {key!r}: not a variable name")
        if any(word in key.upper() for word in _SECRET_WORDS):
            raise RenderError(f"env {key}: looks like a secret; put it in the Nomad Variable, never in the job")
