"""The `network`, `service` and `template` stanzas of a jobspec, as Nomad's Job JSON, and their checks.

The service's own job (templates/nomad-gpu.hcl.j2) listens on a port of its group network, registers
itself with an HTTP health check and reads its config and tokens through `template` blocks. The dev
cluster maps these stanzas with Nomad's field names (`api/resources.go` NetworkResource and Port,
`api/services.go` Service and ServiceCheck, `api/tasks.go` Template; v2.0.5) and refuses at register
what Nomad's job validation refuses (`nomad/structs/structs.go`, `nomad/structs/services.go`, v2.0.5).
It does not run templates or checks: a task here never starts a process.
"""

from __future__ import annotations

from typing import Any

from .hclbody import Body, HclError

JSON = dict[str, Any]

_SECOND = 10**9
# `nomad/structs/services.go` (v2.0.5): minCheckInterval and minCheckTimeout.
_MIN_CHECK_NS = _SECOND
_PROVIDERS = ("consul", "nomad")
_CHANGE_MODES = ("noop", "restart", "signal", "script")


def networks(body: Body) -> list[JSON] | None:
    """Group `network` blocks as `TaskGroup.Networks`. Every `port` block decodes into `DynamicPorts`
    (`hcl:"port,block"`, api/resources.go) and `normalizeNetworkPorts` (jobspec2/parse_job.go, v2.0.5)
    then moves those with a static `Value` to `ReservedPorts`."""
    out = []
    for _, block in body.blocks("network", 0):
        reserved: list[JSON] = []
        dynamic: list[JSON] = []
        for (label,), port in block.blocks("port", 1):
            static = port.integer("static")
            entry = {"Label": label, "Value": static or 0, "To": port.integer("to") or 0,
                     "HostNetwork": port.string("host_network") or "",
                     "IgnoreCollision": bool(port.boolean("ignore_collision"))}
            (reserved if static else dynamic).append(entry)
            port.finish()
        out.append({"Mode": block.string("mode") or "", "Device": "", "CIDR": "", "IP": "",
                    "Hostname": block.string("hostname") or "", "MBits": None, "DNS": None, "CNI": None,
                    "ReservedPorts": reserved or None, "DynamicPorts": dynamic or None})
        block.finish()
    return out or None


def services(body: Body) -> list[JSON] | None:
    """`service` blocks (group or task) as `Services` (`api.Service`, un-canonicalized), each with its
    `check` blocks (`api.ServiceCheck`, durations in nanoseconds)."""
    out = []
    for _, block in body.blocks("service", 0):
        out.append({
            "Name": block.string("name") or "",
            "Tags": block.string_list("tags"),
            "CanaryTags": None,
            "EnableTagOverride": False,
            "PortLabel": block.string("port") or "",
            "AddressMode": block.string("address_mode") or "",
            "Address": block.string("address") or "",
            "Checks": _checks(block),
            "CheckRestart": None,
            "Connect": None,
            "Meta": block.string_map("meta"),
            "CanaryMeta": None,
            "TaggedAddresses": None,
            "TaskName": "",
            "OnUpdate": "",
            "Identity": None,
            "Weights": None,
            "Provider": block.string("provider") or "",
            "Cluster": "",
            "Kind": "",
        })
        block.finish()
    return out or None


def _checks(body: Body) -> list[JSON] | None:
    out = []
    for _, block in body.blocks("check", 0):
        out.append({
            "Name": block.string("name") or "",
            "Type": block.string("type") or "",
            "Command": "",
            "Args": None,
            "Path": block.string("path") or "",
            "Protocol": block.string("protocol") or "",
            "PortLabel": block.string("port") or "",
            "Expose": False,
            "AddressMode": block.string("address_mode") or "",
            "Advertise": "",
            "Interval": block.duration("interval") or 0,
            "Timeout": block.duration("timeout") or 0,
            "InitialStatus": block.string("initial_status") or "",
            "Notes": "",
            "TLSServerName": "",
            "TLSSkipVerify": bool(block.boolean("tls_skip_verify")),
            "Header": _header(block),
            "Method": block.string("method") or "",
            "CheckRestart": None,
            "GRPCService": "",
            "GRPCUseTLS": False,
            "TaskName": "",
            "SuccessBeforePassing": 0,
            "FailuresBeforeCritical": 0,
            "FailuresBeforeWarning": 0,
            "Body": "",
            "OnUpdate": "",
        })
        block.finish()
    return out or None


def _header(body: Body) -> dict[str, list[str]] | None:
    """`header { Name = ["value", ...] }`: `ServiceCheck.Header`, map of string lists."""
    block = body.single_block("header")
    if block is None:
        return None
    out = {}
    for name in block.attribute_names():  # every attribute of the block is a header
        values = block.string_list(name)
        if values is None:
            raise HclError(f"header {name!r} must be a list of strings")
        out[name.strip('"')] = values
    block.finish()
    return out


def templates(body: Body) -> list[JSON] | None:
    """Task `template` blocks as `Task.Templates`, uncanonicalized (unset: null; `api.Template.Canonicalize`
    makes `ChangeMode` "restart" at register)."""
    out = []
    for _, block in body.blocks("template", 0):
        out.append({
            "SourcePath": block.string("source"),
            "DestPath": block.string("destination"),
            "EmbeddedTmpl": block.string("data"),
            "ChangeMode": block.string("change_mode"),
            "ChangeSignal": block.string("change_signal"),
            "ChangeScript": None,
            "Splay": block.duration("splay"),
            "Perms": block.string("perms"),
            "Uid": None, "Gid": None,
            "LeftDelim": block.string("left_delimiter"),
            "RightDelim": block.string("right_delimiter"),
            "Envvars": block.boolean("env"),
            "VaultGrace": None, "Wait": None,
            "ErrMissingKey": block.boolean("error_on_missing_key"),
        })
        block.finish()
    return out or None


_TEMPLATE_DEFAULTS: JSON = {"ChangeMode": "restart", "Splay": 5 * _SECOND, "Perms": "0644", "LeftDelim": "{{",
                           "RightDelim": "}}", "Envvars": False, "ErrMissingKey": False, "VaultGrace": 0}


def canonicalize_group(group: JSON) -> None:
    """Nomad's defaults, in place (`api.Template.Canonicalize`; `api.Service.Canonicalize`: the provider is
    `consul` unless named; v2.0.5)."""
    for service in [*(group.get("Services") or []),
                    *(s for task in group.get("Tasks") or [] for s in task.get("Services") or [])]:
        service["Provider"] = service.get("Provider") or "consul"
    for task in group.get("Tasks") or []:
        for template in task.get("Templates") or []:
            for key, value in _TEMPLATE_DEFAULTS.items():
                if template.get(key) is None:
                    template[key] = value


def service_errors(group: JSON) -> list[str]:
    """What Nomad's validation says of a group's task services and templates (`TaskGroup.Validate`,
    `validateServices`, `Service.Validate`, `ServiceCheck.validateCommon`, `Template.Validate`; v2.0.5)."""
    errors = []
    labels = {port["Label"] for network in group.get("Networks") or []
              for port in (network.get("ReservedPorts") or []) + (network.get("DynamicPorts") or [])}
    # the group's own services are services.validate's (with the port and name rules); a task's are here
    holders = [(f"Task {task.get('Name')} validation failed: ", task.get("Services") or [])
               for task in group.get("Tasks") or []]
    for prefix, listed in holders:
        for service in listed:
            errors += [prefix + error for error in _service_errors(service, labels)]
    for task in group.get("Tasks") or []:
        for i, template in enumerate(task.get("Templates") or []):
            errors += [f"Task {task.get('Name')} validation failed: Template {i + 1} validation failed: {error}"
                       for error in _template_errors(template)]
    return errors


def _service_errors(service: JSON, labels: set[str]) -> list[str]:
    name = service.get("Name") or ""
    provider = service.get("Provider") or "consul"
    errors = []
    if not name:
        errors.append("Service must have a name")
    if provider not in _PROVIDERS:
        errors.append(f"Service {name} validation failed: Service provider must be one of {', '.join(_PROVIDERS)}")
    port = service.get("PortLabel") or ""
    if port and not port.isdigit() and port not in labels:
        errors.append(f'port label "{port}" referenced by services {name} does not exist')
    for check in service.get("Checks") or []:
        why = _check_error(check, provider)
        if why:
            errors.append(f"Service {name} validation failed: Check {check.get('Name') or name} invalid: {why}")
    return errors


def _check_error(check: JSON, provider: str) -> str | None:
    """`ServiceCheck.validateCommon` and `validateNomad` (nomad/structs/services.go, v2.0.5)."""
    allowed = ("tcp", "http") if provider == "nomad" else ("grpc", "tcp", "http", "script")
    kind = str(check.get("Type") or "").lower()
    if kind not in allowed:
        return f'invalid check type ("{kind}"), must be one of {", ".join(allowed)}'
    if kind == "http" and not check.get("Path"):
        return "http type must have http path"
    if kind == "http" and "://" in str(check.get("Path")):
        return "http type must have relative http path"
    interval, timeout = int(check.get("Interval") or 0), int(check.get("Timeout") or 0)
    if interval == 0:
        return "missing required value interval. Interval cannot be less than 1s"
    if interval < _MIN_CHECK_NS:
        return f"interval ({_go_duration(interval)}) cannot be lower than 1s"
    if timeout == 0:
        return "missing required value timeout. Timeout cannot be less than 1s"
    if timeout < _MIN_CHECK_NS:
        return f"timeout ({_go_duration(timeout)}) is lower than required minimum timeout 1s"
    if provider == "nomad" and check.get("TLSSkipVerify"):
        return "tls_skip_verify may only be set for Consul service checks"
    if provider == "nomad" and check.get("TLSServerName"):
        return "tls_server_name may only be set for Consul service checks"
    return None


def _go_duration(ns: int) -> str:
    """Go's `time.Duration` text for the sub-second values refused above (`500ms`, `1.5µs`)."""
    for unit, size in (("ms", 10**6), ("µs", 10**3)):
        if ns >= size:
            return f"{ns / size:g}{unit}"
    return f"{ns}ns"


def _template_errors(template: JSON) -> list[str]:
    errors = []
    destination = template.get("DestPath") or ""
    if not template.get("SourcePath") and not template.get("EmbeddedTmpl"):
        errors.append("Must specify a source path or have an embedded template")
    if not destination:
        errors.append("Must specify a destination for the template")
    elif destination.startswith("../") or "/../" in destination:
        errors.append("destination escapes allocation directory")
    mode = template.get("ChangeMode") or "restart"
    if mode not in _CHANGE_MODES:
        errors.append("Invalid change mode. Must be one of the following: noop, signal, script, restart")
    elif mode == "signal" and not template.get("ChangeSignal"):
        errors.append("Must specify signal value when change mode is signal")
    return errors


__all__ = ["canonicalize_group", "networks", "service_errors", "services", "templates"]
