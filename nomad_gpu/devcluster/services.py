"""Nomad's native service catalogue (`provider = "nomad"`), as the dev cluster plays it.

Read at v2.0.5 and kept as strict:
- a group `service` registers when its allocation starts (`groupServiceHook.Prerun`,
  client/allocrunner/group_service_hook.go) and is removed when it stops (`Postrun`/`PreKill`), and with
  the allocation when it is garbage collected (`deleteServiceRegistrationByAllocIDTxn`,
  nomad/state/state_store.go);
- the registration (`ServiceRegistration`, nomad/structs/service_registration.go) is built by
  `generateNomadServiceRegistration` (client/serviceregistration/nsd/nsd.go): ID
  `_nomad-task-<alloc>-group-<group>-<service>-<port label>` (`MakeAllocServiceID`, id.go), Address and
  Port from the allocation's port mapping in address mode auto/host (`GetAddress`, address.go: the
  mapping's HostIP and host Value), the node's ID and datacenter, the service's tags;
- `GET /v1/service/<name>` lists a namespace's registrations of that name (an empty list, never 404),
  `GET /v1/services` one `{Namespace, Services: [{ServiceName, Tags}]}` per namespace
  (command/agent/service_registration_endpoint.go, `ServiceRegistration.List`); both need read-job;
- events on the `Service` topic: `ServiceRegistration` and `ServiceDeregistration`, FilterKeys
  `[JobID, ServiceName]` (nomad/state/events.go).
A `consul` service is accepted and never registered: the dev cluster has no Consul.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .events import Event

if TYPE_CHECKING:
    from .allocs import Alloc
    from .state import ClusterState

JSON = dict[str, Any]

_NAME = re.compile(r"(?i:[a-z0-9]|[a-z0-9][a-z0-9\-]{0,61}[a-z0-9])")  # Service.ValidateName, services.go
_NS = 10**9


def group_services(job: JSON, group_name: str) -> list[JSON]:
    """The `Services` of one task group of a job (group-level only: our templates write no task ones)."""
    group = next((g for g in job.get("TaskGroups") or [] if g.get("Name") == group_name), None)
    return list((group or {}).get("Services") or [])


def canonicalize(job: JSON, group: JSON) -> None:
    """`Service.Canonicalize` (api/services.go v2.0.5): a default name, address mode, on_update and
    provider (`consul` when none is given), and each check's defaults."""
    for service in group.get("Services") or []:
        service["Name"] = service.get("Name") or f"{job.get('Name') or job.get('ID')}-{group.get('Name')}"
        service["AddressMode"] = service.get("AddressMode") or "auto"
        service["OnUpdate"] = service.get("OnUpdate") or "require_healthy"
        service["Provider"] = service.get("Provider") or "consul"
        service["Cluster"] = service.get("Cluster") or "default"


def validate(group: JSON, prefix: str) -> list[str]:
    """`Service.Validate`, `ServiceCheck.validateCommon`/`validateNomad` and the port check of
    `TaskGroup.validateServices` (nomad/structs/services.go, structs.go, v2.0.5)."""
    errors: list[str] = []
    labels = {str(p.get("Label")) for n in group.get("Networks") or []
              for p in [*(n.get("ReservedPorts") or []), *(n.get("DynamicPorts") or [])]}
    missing: dict[str, set[str]] = {}
    for service in group.get("Services") or []:
        name, provider = str(service.get("Name") or ""), service.get("Provider")
        if not _NAME.fullmatch(name):
            errors.append(f"{prefix}: Service name must be valid per RFC 1123 and can contain only alphanumeric "
                          f"characters or dashes and must be no longer than 63 characters: {name!r}")
        if provider not in ("consul", "nomad"):
            errors.append(f'{prefix}: Service provider must be "consul", or "nomad"; not "{provider}"')
        port = str(service.get("PortLabel") or "")
        if port and not port.isdigit() and port not in labels:
            missing.setdefault(port, set()).add(name)
        for check in service.get("Checks") or []:
            errors.extend(f"{prefix}: {e}" for e in _check_errors(check, provider == "nomad"))
    for port, names in sorted(missing.items()):
        errors.append(f'{prefix}: port label "{port}" referenced by services {", ".join(sorted(names))} '
                      "does not exist")
    return errors


def _check_errors(check: JSON, nomad: bool) -> list[str]:
    kind = str(check.get("Type") or "").lower()
    allowed = ("tcp", "http") if nomad else ("tcp", "http", "script", "grpc")
    if kind not in allowed:
        return [f'invalid check type ("{kind}"), must be one of {", ".join(allowed)}']
    path = str(check.get("Path") or "")
    if kind == "http" and not path:
        return ["http type must have http path"]
    if kind == "http" and re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", path):
        return ["http type must have relative http path"]
    interval, timeout = int(check.get("Interval") or 0), int(check.get("Timeout") or 0)
    if interval == 0:
        return ["missing required value interval. Interval cannot be less than 1s"]
    if interval < _NS:
        return [f"interval ({interval / _NS:g}s) cannot be lower than 1s"]
    if timeout == 0:
        return ["missing required value timeout. Timeout cannot be less than 1s"]
    if timeout < _NS:
        return [f"timeout ({timeout / _NS:g}s) is lower than required minimum timeout 1s"]
    if nomad and check.get("TLSSkipVerify"):  # `ServiceCheck.validateNomad`
        return ["tls_skip_verify may only be set for Consul service checks"]
    if nomad and check.get("TLSServerName"):
        return ["tls_server_name may only be set for Consul service checks"]
    return []


def registrations_for(alloc: Alloc, datacenter: str, index: int) -> list[JSON]:
    """The registrations a starting allocation makes (its group's `nomad` services)."""
    out = []
    mapping = {port.label: port for port in alloc.ports}
    for service in group_services(alloc.job, alloc.task_group):
        if service.get("Provider") != "nomad":
            continue  # no Consul here: a consul service is rendered and accepted, never registered
        label = str(service.get("PortLabel") or "")
        port = mapping.get(label)
        address, number = (port.host_ip, port.value) if port else (alloc.node_address, int(label or 0)
                                                                     if label.isdigit() else 0)
        name = str(service["Name"])
        out.append({
            "ID": f"_nomad-task-{alloc.id}-group-{alloc.task_group}-{name}-{label}",
            "ServiceName": name, "Namespace": alloc.namespace, "NodeID": alloc.node_id, "Datacenter": datacenter,
            "JobID": alloc.job_id, "AllocID": alloc.id, "Tags": list(service.get("Tags") or []),
            "Address": address, "Port": number, "CreateIndex": index, "ModifyIndex": index,
        })
    return out


def _event(kind: str, registration: JSON, index: int) -> Event:
    return Event("Service", kind, registration["ID"], registration["Namespace"],
                 (registration["JobID"], registration["ServiceName"]), index, {"Service": registration})


def on_running(state: ClusterState, alloc: Alloc) -> None:
    """Register the allocation's services (the first start only: a restart keeps them)."""
    if any(r["AllocID"] == alloc.id for r in state.service_registrations.values()):
        return
    node = state.nodes.get(alloc.node_id)
    if not registrations_for(alloc, "", 0):
        return
    index = state._next_index()  # the client's registration is a raft write of its own
    made = registrations_for(alloc, node.datacenter if node else "", index)
    for registration in made:
        state.service_registrations[registration["ID"]] = registration
    state._emit(index, [_event("ServiceRegistration", r, index) for r in made])


def on_stopped(state: ClusterState, alloc_ids: set[str]) -> None:
    """Remove the registrations of allocations that stopped (or were collected)."""
    gone = [r for r in state.service_registrations.values() if r["AllocID"] in alloc_ids]
    if not gone:
        return
    index = state._next_index()
    for registration in gone:
        del state.service_registrations[registration["ID"]]
    state._emit(index, [_event("ServiceDeregistration", r, index) for r in gone])


def by_name(state: ClusterState, namespace: str, name: str) -> list[JSON]:
    """`GET /v1/service/<name>`: the namespace's registrations of that name, oldest first."""
    with state.lock:
        found = [dict(r) for r in state.service_registrations.values()
                 if r["ServiceName"] == name and (namespace == "*" or r["Namespace"] == namespace)]
    return sorted(found, key=lambda r: (r["CreateIndex"], r["ID"]))


def listing(state: ClusterState, namespace: str) -> list[JSON]:
    """`GET /v1/services`: per namespace, each service name once with the union of its tags."""
    with state.lock:
        registrations = list(state.service_registrations.values())
    spaces: dict[str, dict[str, set[str]]] = {}
    for r in registrations:
        if namespace != "*" and r["Namespace"] != namespace:
            continue
        spaces.setdefault(r["Namespace"], {}).setdefault(r["ServiceName"], set()).update(r["Tags"])
    return [{"Namespace": ns, "Services": [{"ServiceName": name, "Tags": sorted(tags)}
                                           for name, tags in sorted(services.items())]}
            for ns, services in sorted(spaces.items())]
