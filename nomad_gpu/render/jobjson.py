"""The Job JSON of a bundled job template, built from the same context the template renders.

Registering a job took three requests: render HCL, `POST /v1/jobs/parse` for the Job JSON, register
both (the HCL as the job's `Submission`, shown in Nomad's UI). For the bundled `batch` and `service`
templates this module builds, from the template's own context (jobs.build_job_context), the JSON that
Nomad's parse (`canonicalize=false`) returns for the HCL that context renders, so the parse request
can be skipped. Each field below mirrors one line of templates/_job_header.hcl.j2 and _groups.hcl.j2,
mapped as jobspec2 maps it (api.Job's field names, unset fields null, durations in nanoseconds,
`port` blocks with a static value moved to `ReservedPorts` by `normalizeNetworkPorts`; jobspec2/
parse_job.go, api/jobs.go, api/tasks.go, api/resources.go, api/services.go, v2.0.5).

The equivalence is proven by test only for the bundled templates (tests/render/test_job_json.py
compares this JSON with the parse of the rendered HCL for every template and example): a template
read from another directory, or a bundled template changed without this module, is not covered, and
`PROVEN_TEMPLATES` is what callers check before they skip the parse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["PROVEN_TEMPLATES", "job_json"]

JSON = dict[str, Any]

PROVEN_TEMPLATES: Mapping[str, str] = {"batch": "batch", "service": "service"}
"""Bundled template -> the job `type` it writes; the templates whose JSON is built here."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s)")
_NS = {"ms": 10**6, "s": 10**9}


class _Unproven(Exception):
    """A value this module does not map (the caller asks Nomad's parse instead)."""


def job_json(template: str, context: Mapping[str, Any], *, max_run_duration_field: bool) -> JSON | None:
    """The Job JSON of ``template`` rendered with ``context``, or None where it is not proven (another
    template, a value of a kind the templates do not write): then the HCL goes through Nomad's parse.
    ``max_run_duration_field``: the Nomad that would parse it has `TaskGroup.MaxRunDuration` (2.0.3
    on): the key is written, null when unset; without it the key is left out (a null pointer either
    way once Nomad decodes it)."""
    kind = PROVEN_TEMPLATES.get(template)
    if kind is None:
        return None
    try:
        return _job(kind, context, max_run_duration_field)
    except _Unproven:
        return None


def _job(kind: str, context: Mapping[str, Any], max_run_duration_field: bool) -> JSON:
    job = context["job"]
    written = job.get("max_run_duration") if kind == "batch" else None  # only batch.hcl.j2 writes it
    limit = None if written is None else _duration(written)
    groups = [_group(group, limit, max_run_duration_field) for group in context["groups"]]
    return {
        "Region": None, "Namespace": job["namespace"], "ID": job["id"], "Name": job["id"], "Type": kind,
        "Priority": job["priority"], "AllAtOnce": None, "Datacenters": list(job["datacenters"]),
        "NodePool": job["node_pool"],
        "Constraints": [{"LTarget": "${node.unique.id}", "RTarget": job["node_id"], "Operand": "="}],
        "Affinities": None, "Spreads": None, "TaskGroups": groups, "Update": None, "Periodic": None,
        "ParameterizedJob": None, "Reschedule": None, "Meta": dict(job["meta"]), "Stop": None, "ParentID": None,
        "Dispatched": False, "Payload": None, "Status": None, "StatusDescription": None, "Version": None,
        "SubmitTime": None, "CreateIndex": None, "ModifyIndex": None, "JobModifyIndex": None,
    }


def _group(group: Mapping[str, Any], limit: int | None, field: bool) -> JSON:
    out: JSON = {
        "Name": group["name"], "Count": group["count"], "Constraints": None, "Affinities": None, "Spreads": None,
        "Tasks": [_task(group)],
        # `restart { attempts = 0, mode = "fail" }` and `reschedule { attempts = 0, unlimited = false }`
        "RestartPolicy": {"Interval": None, "Attempts": 0, "Delay": None, "Mode": "fail", "RenderTemplates": None},
        "ReschedulePolicy": {"Attempts": 0, "Interval": None, "Delay": None, "DelayFunction": None,
                             "MaxDelay": None, "Unlimited": False},
        "EphemeralDisk": None,
        "Networks": None if group["network"] is None else [_network(group["network"])],
        "Meta": dict(group["meta"]) or None,
        "Services": None if group["service"] is None else [_service(group["service"])],
        "Volumes": None,
    }
    if field:
        out["MaxRunDuration"] = limit
    return out


def _task(group: Mapping[str, Any]) -> JSON:
    task, resources, device = group["task"], group["resources"], group["device"]
    devices = None if device is None else [{
        "Name": device["name"], "Count": device["count"],
        "Constraints": [{"LTarget": "${device.ids}", "RTarget": device["ids"], "Operand": "set_contains_any"}],
        "Affinities": None,
    }]
    return {
        "Name": task["name"], "Driver": task["driver"], "User": None,
        "Config": {key: _value(value) for key, value in task["config"].items()},
        "Constraints": None, "Affinities": None, "Env": dict(task["env"]) or None, "Services": None,
        "Resources": {"CPU": resources["cpu"], "Cores": None, "MemoryMB": resources["memory"],
                      "MemoryMaxMB": resources["memory_max"], "DiskMB": None, "Networks": None,
                      "Devices": devices},
        "RestartPolicy": None, "Meta": None,
        "KillTimeout": None if task.get("kill_timeout") is None else _duration(task["kill_timeout"]),
        "LogConfig": None, "Artifacts": None, "Templates": None, "Leader": False,
        "KillSignal": task.get("kill_signal") or "", "Kind": "", "VolumeMounts": None,
    }


def _network(network: Mapping[str, Any]) -> JSON:
    reserved: list[JSON] = []
    dynamic: list[JSON] = []
    for port in network["ports"]:
        static = port["static"]
        entry = {"Label": port["label"], "Value": static or 0, "To": port["to"] or 0, "HostNetwork": "",
                 "IgnoreCollision": False}
        (reserved if static else dynamic).append(entry)  # normalizeNetworkPorts: Value > 0 is reserved
    return {"Mode": "", "Device": "", "CIDR": "", "IP": "", "Hostname": "", "MBits": None, "DNS": None,
            "CNI": None, "ReservedPorts": reserved or None, "DynamicPorts": dynamic or None}


def _service(service: Mapping[str, Any]) -> JSON:
    check = service["check"]
    return {
        "Name": service["name"], "Tags": list(service["tags"]) or None, "CanaryTags": None,
        "EnableTagOverride": False, "PortLabel": _text(service["port"]), "AddressMode": "", "Address": "",
        "Checks": None if check is None else [_check(check)], "CheckRestart": None, "Connect": None,
        "Meta": None, "CanaryMeta": None, "TaggedAddresses": None, "TaskName": "", "OnUpdate": "",
        "Identity": None, "Weights": None, "Provider": service["provider"], "Cluster": "", "Kind": "",
    }


def _check(check: Mapping[str, Any]) -> JSON:
    return {
        "Name": check["name"], "Type": check["type"], "Command": "", "Args": None, "Path": check["path"] or "",
        "Protocol": "", "PortLabel": "", "Expose": False, "AddressMode": "", "Advertise": "",
        "Interval": _duration(check["interval"]), "Timeout": _duration(check["timeout"]), "InitialStatus": "",
        "Notes": "", "TLSServerName": "", "TLSSkipVerify": False, "Header": None, "Method": "",
        "CheckRestart": None, "GRPCService": "", "GRPCUseTLS": False, "TaskName": "", "SuccessBeforePassing": 0,
        "FailuresBeforeCritical": 0, "FailuresBeforeWarning": 0, "Body": "", "OnUpdate": "",
    }


def _text(value: Any) -> str:
    """A string attribute written as a number (a service `port = 8080`) is its decimal text in Go."""
    return value if isinstance(value, str) else str(_value(value))


def _value(value: Any) -> Any:
    """A context value as JSON: what hcl_literal writes (str, int, bool, lists of them), decoded."""
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, list | tuple):
        return [_value(item) for item in value]
    raise _Unproven(type(value).__name__)


def _duration(text: str) -> int:
    """The durations the context writes (`90s`, `1500ms`: network._duration; `1.5s`: jobs._seconds), in
    nanoseconds, exactly as Go's `time.ParseDuration` (decimal, no float rounding)."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise _Unproven(text)
    nanos = Decimal(match.group(1)) * _NS[match.group(2)]
    if nanos != nanos.to_integral_value():
        raise _Unproven(text)
    return int(nanos)
