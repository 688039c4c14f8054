"""The group `network` and `service` blocks of `POST /v1/jobs/parse`, as Nomad's jobspec2 decodes them.

`network { port "http" { to = 8000 } port "metrics" { static = 9100 } }` decodes into `api.NetworkResource`
(api/resources.go, v2.0.5): every `port` block lands in `DynamicPorts` (`hcl:"port,block"`) and
`normalizeNetworkPorts` (jobspec2/parse_job.go, v2.0.5) then moves those with a static `Value` to
`ReservedPorts`. `service { ... check { ... } }` decodes into `api.Service` and `api.ServiceCheck`
(api/services.go, v2.0.5), durations in nanoseconds. Only the attributes our templates write, plus the
common ones a hand-written job uses, are read; anything else is refused by `Body.finish`.
"""

from __future__ import annotations

from typing import Any

from .hclbody import Body

JSON = dict[str, Any]


def networks(body: Body) -> list[JSON] | None:
    """A group's `network` blocks as `TaskGroup.Networks` (Nomad allows one; validation says so)."""
    out = []
    for _, block in body.blocks("network", 0):
        dynamic: list[JSON] = []
        reserved: list[JSON] = []
        for (label,), port in block.blocks("port", 1):
            value = port.integer("static") or 0
            entry = {"Label": label, "Value": value, "To": port.integer("to") or 0,
                     "HostNetwork": port.string("host_network") or "",
                     "IgnoreCollision": bool(port.boolean("ignore_collision"))}
            port.finish()
            (reserved if value > 0 else dynamic).append(entry)
        out.append({"Mode": block.string("mode") or "", "Device": "", "CIDR": "", "IP": "", "DNS": None,
                    "ReservedPorts": reserved or None, "DynamicPorts": dynamic or None, "Hostname": "",
                    "MBits": None, "CNI": None})
        block.finish()
    return out or None


def services(body: Body) -> list[JSON] | None:
    """A group's `service` blocks as `TaskGroup.Services` (api.Service, un-canonicalized)."""
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
            "Checks": [_check(check) for _, check in block.blocks("check", 0)] or None,
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


def _check(body: Body) -> JSON:
    check = {
        "Name": body.string("name") or "",
        "Type": body.string("type") or "",
        "Command": "",
        "Args": None,
        "Path": body.string("path") or "",
        "Protocol": body.string("protocol") or "",
        "PortLabel": body.string("port") or "",
        "Expose": False,
        "AddressMode": body.string("address_mode") or "",
        "Advertise": "",
        "Interval": body.duration("interval") or 0,
        "Timeout": body.duration("timeout") or 0,
        "InitialStatus": body.string("initial_status") or "",
        "Notes": "",
        "TLSServerName": "",
        "TLSSkipVerify": False,
        "Header": None,
        "Method": body.string("method") or "",
        "CheckRestart": None,
        "GRPCService": "",
        "GRPCUseTLS": False,
        "TaskName": "",
        "SuccessBeforePassing": 0,
        "FailuresBeforeCritical": 0,
        "FailuresBeforeWarning": 0,
        "Body": "",
        "OnUpdate": "",
    }
    body.finish()
    return check
