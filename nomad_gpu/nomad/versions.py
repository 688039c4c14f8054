"""Which Nomad versions the service talks to, and so which jobspec fields every agent understands.

A field Nomad added in a patch release is only safe to write when every agent that reads the job
has it: the servers parse and validate the jobspec, the client on the chosen node enforces it. A
server older than the field refuses the HCL ("Unsupported argument"); a client older than it never
sees the field, so the job would run without the limit. The service therefore asks both:

* servers: `GET /v1/agent/members` (`AgentMembersRequest`, command/agent/agent_endpoint.go v2.0.3,
  needing node read like the node list), each member's `Tags["build"]` (`setupSerf`, nomad/server.go);
* clients: `GET /v1/nodes`, each stub's `Version` (`NodeListStub`, nomad/structs/structs.go).

Versions are compared as MAJOR.MINOR.PATCH; a suffix (`-dev`, `+ent`) is ignored. A version that
cannot be read, or no agents at all, counts as "does not have it": the service's own timer remains.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

Version = tuple[int, int, int]

MAX_RUN_DURATION: Version = (2, 0, 3)
"""`TaskGroup.MaxRunDuration` (#27803): in api/tasks.go and nomad/structs/structs.go from v2.0.3."""

_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text: object) -> Version | None:
    """`2.0.3`, `v1.10.5`, `2.0.3-dev`, `1.11.2+ent`; None for anything else."""
    if not isinstance(text, str):
        return None
    match = _VERSION_RE.match(text.strip())
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return (major, minor, patch)


def server_versions(members: Any) -> list[Version | None]:
    """Each server's version from a `ServerMembersResponse`; None where a member does not say."""
    listed = members.get("Members") if isinstance(members, Mapping) else None
    if not isinstance(listed, list):
        return []
    out: list[Version | None] = []
    for member in listed:
        tags = member.get("Tags") if isinstance(member, Mapping) else None
        out.append(parse_version(tags.get("build")) if isinstance(tags, Mapping) else None)
    return out


def node_versions(stubs: Iterable[Any]) -> list[Version | None]:
    """Each client's version from `GET /v1/nodes` stubs; None where a stub does not say."""
    return [parse_version(stub.get("Version")) if isinstance(stub, Mapping) else None for stub in stubs]


def all_have(versions: Iterable[Version | None], wanted: Version) -> bool:
    """True only when there is at least one version and every one is `wanted` or later."""
    listed = list(versions)
    return bool(listed) and all(v is not None and v >= wanted for v in listed)
