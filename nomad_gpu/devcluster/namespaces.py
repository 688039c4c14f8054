"""Namespaces that come and go while the cluster runs, and what a stream subscribed to `*` sees of them.

Nomad creates and deletes namespaces at run time (`POST /v1/namespace/:name`, `DELETE
/v1/namespace/:name`: `command/agent/namespace_endpoint.go` `namespaceUpdate` and `namespaceDelete`,
v2.0.5), and an event stream asked for `namespace=*` is expanded ONCE, when it subscribes, to the
namespaces that exist then (`nomad/event_endpoint.go` `validateACL`: "Namespaces is set once"); the
subscription then drops every event of any other namespace (`nomad/stream/subscription.go` `filter`)
and creating a namespace closes no subscription (`nomad/stream/event_broker.go` closes them only on
token and policy changes). So a job in a namespace created after a watcher subscribed produces no
events on that stream, for as long as the stream stays up. The dev cluster keeps exactly that.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .jobstatus import job_status
from .records import NotFound

if TYPE_CHECKING:
    from .state import ClusterState

_VALID_NAME = re.compile(r"^[a-zA-Z0-9-]{1,128}$")
"""`validNamespaceName` (nomad/structs/structs.go, v2.0.5)."""
_MAX_DESCRIPTION = 256
"""`maxNamespaceDescriptionLength` (nomad/structs/structs.go, v2.0.5)."""


_ENTERPRISE_CONFIG = (("NodePoolConfiguration", "node pool configuration: Node Pools Governance"),
                      ("VaultConfiguration", "vault configuration: Multi-Cluster Vault"),
                      ("ConsulConfiguration", "consul configuration: Multi-Cluster Consul"))
"""What Nomad CE refuses in a namespace: `Namespace.Validate` (nomad/structs/structs.go) prefixes the
`Validate` of each, which is "... is unlicensed." for any non-nil value (nomad/structs/structs_ce.go,
v2.0.5 and v1.10.5). So a CE namespace has no default node pool: a job without one is in `default`
(`jobNodePoolMutatingHook`, nomad/job_endpoint_hook_node_pool_ce.go), as `jobs.canonicalize` fills it."""


class NamespaceError(Exception):
    """A refusal Nomad answers with `status` and this text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


@dataclass
class NamespaceRecord:
    name: str
    description: str
    create_index: int
    modify_index: int

    def to_json(self) -> dict[str, Any]:
        return {"Name": self.name, "Description": self.description, "Quota": "", "Capabilities": None,
                "NodePoolConfiguration": None, "VaultConfiguration": None, "ConsulConfiguration": None,
                "Meta": None, "CreateIndex": self.create_index, "ModifyIndex": self.modify_index}


def initial(names: frozenset[str]) -> dict[str, NamespaceRecord]:
    """The cluster file's namespaces, all created at index 1 ("default" with Nomad's description)."""
    return {name: NamespaceRecord(name, "Default shared namespace" if name == "default" else "", 1, 1)
            for name in sorted(names)}


def upsert(state: ClusterState, path_name: str, body: Any) -> int:
    """`namespaceUpdate` then `Namespace.UpsertNamespaces` (nomad/namespace_endpoint.go, v2.0.5):
    the body's Name must match the path (400), must be valid (500, as an RPC error); returns the index."""
    if not isinstance(body, dict):
        raise NamespaceError(400, "Request decode failed: body is not a Namespace object")
    name, description = body.get("Name"), body.get("Description") or ""
    if name != path_name:
        raise NamespaceError(400, "Namespace name does not match request path")
    errors = []
    if not isinstance(name, str) or not _VALID_NAME.match(name):
        errors.append(f"invalid name {_go_quote(name)}. Must match regex {_VALID_NAME.pattern}")
    if not isinstance(description, str) or len(description) > _MAX_DESCRIPTION:
        errors.append(f"description longer than {_MAX_DESCRIPTION}")
    for field, what in _ENTERPRISE_CONFIG:  # any value but null, `{}` too: the struct pointer is set
        if body.get(field) is not None:
            errors.append(f"invalid {what} is unlicensed.")
    if errors:
        raise NamespaceError(500, f"Invalid namespace {_go_quote(name)}: {_multierror(errors)}")
    with state.lock:
        index = state._next_index()
        record = state.namespace_records.get(name)
        if record is None:
            state.namespace_records[name] = NamespaceRecord(name, description, index, index)
        else:
            record.description, record.modify_index = description, index
        state.namespaces = frozenset(state.namespace_records)
        state.namespace_index = index
        return index


def delete(state: ClusterState, name: str) -> int:
    """`Namespace.DeleteNamespaces` (nomad/namespace_endpoint.go, v2.0.5): never "default", never one
    with non-terminal jobs or allocations; a namespace that does not exist fails in the state store."""
    if name == "default":
        raise NamespaceError(500, "can not delete default namespace")
    with state.lock:
        if name not in state.namespace_records:
            raise NamespaceError(500, "namespace not found")
        errors = []
        if any(ns == name and job_status(state, record) != "dead" for (ns, _), record in state.jobs.items()):
            errors.append(f'namespace "{name}" has non-terminal jobs in regions: [global]')
        if any(alloc.namespace == name for alloc in state.live.values()):
            errors.append(f'namespace "{name}" has non-terminal allocations in regions: [global]')
        if errors:
            raise NamespaceError(500, _multierror(errors))
        index = state._next_index()
        del state.namespace_records[name]
        state.namespaces = frozenset(state.namespace_records)
        state.namespace_index = index
        return index


def get(state: ClusterState, name: str) -> dict[str, Any]:
    record = state.namespace_records.get(name)
    if record is None:
        raise NotFound("Namespace not found")
    return record.to_json()


def listing(state: ClusterState) -> list[dict[str, Any]]:
    return [state.namespace_records[name].to_json() for name in sorted(state.namespace_records)]


def expand(state: ClusterState, namespace: str) -> frozenset[str]:
    """The namespaces a stream subscribes to: `*` becomes those that exist NOW, once
    (`nomad/event_endpoint.go` `validateACL`, v2.0.5)."""
    if namespace == "*":
        with state.lock:
            return frozenset(state.namespace_records)
    return frozenset({namespace})


def _go_quote(value: object) -> str:
    """Go's `%q` of a string (double quotes), as the errors above print the name."""
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)


def _multierror(errors: list[str]) -> str:
    """go-multierror's text, as Nomad's RPC errors carry it."""
    noun = "error" if len(errors) == 1 else "errors"
    return f"{len(errors)} {noun} occurred:\n" + "".join(f"\t* {e}\n" for e in errors) + "\n"
