"""Ports and a service registration: how a serving job or a notebook is reached (DESIGN 19).

A spec names its ports (``ports: {http: {to: 8000}, metrics: {static: 9100}}``) and, optionally, one
service registered with Nomad's native catalogue (or Consul) with a health check. Nomad turns them into
a group ``network`` block (a port is dynamic, from the client's range, unless ``static``; ``to`` is the
port inside the task's network namespace) and a group ``service`` block. The rules follow Nomad's own
validation (``TaskGroup.validateNetworks``, ``Service.Validate``, ``ServiceCheck.validateCommon`` and
``validateNomad`` in nomad/structs, v2.0.5), so a spec Nomad would refuse is refused at submit, with
its location. :func:`network_context` and :func:`service_context` are what the templates see.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from nomad_gpu.render.textrules import TextRule, capped

__all__ = [
    "CheckSpec",
    "DEFAULT_CHECK_INTERVAL_S",
    "DEFAULT_CHECK_TIMEOUT_S",
    "PortSpec",
    "Ports",
    "ServiceSpec",
    "check_service_port",
    "network_context",
    "service_context",
]

DEFAULT_CHECK_INTERVAL_S = 10.0
"""A check's interval when the spec gives none: Nomad requires one (at least 1 s)."""
DEFAULT_CHECK_TIMEOUT_S = 2.0
"""A check's timeout when the spec gives none: Nomad requires one (at least 1 s)."""
MIN_CHECK_S = 1.0
"""`minCheckInterval` and `minCheckTimeout` (nomad/structs/services.go, v2.0.5)."""

_PORT_LABEL = TextRule(r"[A-Za-z_][A-Za-z0-9_]{0,31}", "a port name ([A-Za-z_][A-Za-z0-9_]*, at most 32 characters)",
                       32)
# RFC 1123 / RFC 2782, as `Service.ValidateName` allows (nomad/structs/services.go v2.0.5): 1-63 of
# letters, digits and '-', not starting or ending with '-'.
_SERVICE_NAME = TextRule(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?",
                         "a service name: 1-63 letters, digits and '-', not starting or ending with '-'", 63)
_TAG = TextRule(r"[^\x00-\x1f\x7f]{1,128}", "1-128 printable characters", 128)
_DURATION_CAP = 64
"""The longest duration text read (`1h30m15s500ms` is 13): a cap before the pattern, as for every text."""


def _seconds(value: Any) -> float:
    """`10s`, `2m`, `1m30s` or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("must be a duration like 10s, or a number of seconds")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        capped(value, _DURATION_CAP)
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value.strip())
        if parts and "".join(n + u for n, u in parts) == value.strip():
            return sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts)
    raise ValueError("must be a duration like 10s, or a number of seconds")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PortNumber = Annotated[int, Field(strict=True, ge=1, le=65535)]
PortLabel = Annotated[str, Field(strict=True), AfterValidator(_PORT_LABEL.check)]
CheckSeconds = Annotated[float, BeforeValidator(_seconds), Field(ge=MIN_CHECK_S, le=3600, allow_inf_nan=False)]


class PortSpec(_Model):
    """One named port of a group: dynamic (Nomad picks a free one from the client's range) unless static."""

    static: PortNumber | None = None
    """A fixed host port: the job can only run where that port is free (Nomad refuses a node where it is
    taken, "reserved port collision")."""
    to: PortNumber | None = None
    """The port the task listens on inside its network namespace (docker's port mapping); unset: the
    host port itself."""


def _null_port(value: Any) -> Any:
    return {} if value is None else value  # `http:` with nothing after it: a dynamic port


Ports = dict[PortLabel, Annotated[PortSpec, BeforeValidator(_null_port)]]
"""Named ports; the name is what `service.port` and Nomad's `NOMAD_PORT_<name>` use."""


class CheckSpec(_Model):
    """The health check Nomad runs against the service's address."""

    type: Literal["http", "tcp"] = "http"
    """`http` (a GET of `path` must answer 2xx) or `tcp` (the port must accept a connection): the two
    Nomad's own service provider runs."""
    path: Annotated[str, Field(strict=True, min_length=1, max_length=1024)] | None = None
    """The HTTP path, relative to the service's address (`/health`); required for `http`."""
    interval: CheckSeconds = DEFAULT_CHECK_INTERVAL_S
    """How often the check runs."""
    timeout: CheckSeconds = DEFAULT_CHECK_TIMEOUT_S
    """How long one run may take."""

    @model_validator(mode="after")
    def _path_fits_type(self) -> CheckSpec:
        if self.type == "http":
            if self.path is None:
                raise ValueError("an http check needs a path, like /health")
            if not self.path.startswith("/") or any(c.isspace() or not c.isprintable() for c in self.path):
                raise ValueError(f"path must be a relative URL path starting with '/', got {self.path!r}")
        elif self.path is not None:
            raise ValueError("path is only used by an http check")
        return self


class ServiceSpec(_Model):
    """A service registration: Nomad publishes the task's address under `name` while it runs."""

    name: Annotated[str, Field(strict=True), AfterValidator(_SERVICE_NAME.check)]
    """The name the address is found by (`GET /v1/service/<name>`, or Consul's catalogue)."""
    port: PortLabel
    """Which of the group's `ports` the service is reached on."""
    provider: Literal["nomad", "consul"] = "nomad"
    """`nomad`: Nomad's own service catalogue (no Consul needed); `consul`: a Consul agent on the node."""
    tags: Annotated[list[Annotated[str, Field(strict=True), AfterValidator(_TAG.check)]],
                    Field(max_length=64)] = Field(default_factory=list)
    """Tags published with the registration."""
    check: CheckSpec | None = None
    """A health check; unset: none (the address is published as soon as the task starts)."""


def check_service_port(ports: dict[str, PortSpec], service: ServiceSpec | None) -> None:
    """`port label %q referenced by services %v does not exist` (TaskGroup.validateServices, v2.0.5),
    said in the spec's terms."""
    if service is not None and service.port not in ports:
        known = ", ".join(sorted(ports)) or "none"
        raise ValueError(f"service.port {service.port!r} is not one of the group's ports ({known})")


def network_context(ports: dict[str, PortSpec]) -> dict[str, Any] | None:
    """The group's `network` block for a template: each port's label, `static` and `to` (None: unset)."""
    if not ports:
        return None
    return {"ports": [{"label": label, "static": port.static, "to": port.to}
                      for label, port in sorted(ports.items())]}


def service_context(service: ServiceSpec | None) -> dict[str, Any] | None:
    """The group's `service` block for a template; durations as Nomad's text (`10s`)."""
    if service is None:
        return None
    check = service.check
    return {
        "name": service.name,
        "port": service.port,
        "provider": service.provider,
        "tags": list(service.tags),
        "check": None if check is None else {
            "name": f"{service.name}-{check.type}",
            "type": check.type,
            "path": check.path,
            "interval": _duration(check.interval),
            "timeout": _duration(check.timeout),
        },
    }


def _duration(seconds: float) -> str:
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"
