"""Nomad Variables: `GET/PUT/DELETE /v1/var/<path>` and `GET /v1/vars`, with their ACL rules.

The service's own job reads its config, tokens and TLS files from a Variable (`nomad-gpu deploy render`),
so an operator's deploy on the dev cluster starts with `nomad var put`. Modelled on Nomad v2.0.5:
`command/agent/variable_endpoint.go` (the HTTP shapes: 400 "variable missing required Items object",
404 "variable not found", 409 with the current variable on a failed `?cas=`, 204 on delete) and
`nomad/variables_endpoint.go` (the namespace is the body's, else the request's; ACLs: `write` to put,
`read` to get, `destroy` to delete, `list` to list; `VariableDecrypted.Validate` in
`nomad/structs/variables.go`: the path rules, 64 KiB, no empty Variable, no `*` namespace).

A task reads the Variables of its own job without any policy (the implicit rule of
`acl/acl.go` AllowVariableOperation with a workload's claim: `nomad/jobs`, `nomad/jobs/<job>`,
`.../<group>`, `.../<group>/<task>` in the job's namespace, while its allocation is not terminal); the dev
cluster hands such an identity out at `GET /_dev/allocation/<id>/identity` (the JWT Nomad's client holds).
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

MAX_VARIABLE_BYTES = 64 * 1024
"""`maxVariableSize` (nomad/structs/variables.go, v2.0.5): keys and values together."""
_PATH = re.compile(r"[a-zA-Z0-9\-_~/]{1,128}")


class VariableError(Exception):
    """A refusal: `status` and Nomad's text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


@dataclass(frozen=True)
class WorkloadClaim:
    """What a task's identity says about it (`structs.IdentityClaims`): whose Variables it may read."""

    namespace: str
    job: str
    group: str
    task: str
    alloc_id: str

    def may_read(self, namespace: str, path: str) -> bool:
        job = f"nomad/jobs/{self.job}"
        return namespace == self.namespace and path in (
            "nomad/jobs", job, f"{job}/{self.group}", f"{job}/{self.group}/{self.task}")


def check_variable(namespace: str, path: str, items: Any) -> None:
    """`VariableDecrypted.Validate` (nomad/structs/variables.go, v2.0.5); errors answer 500 as RPC errors do."""
    if namespace == "*":
        raise VariableError(500, 'can not target wildcard ("*")namespace')
    if not isinstance(items, dict) or not items:
        raise VariableError(500, "empty variables are invalid")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in items.items()):
        raise VariableError(400, "json: cannot unmarshal Items: every item must be a string")
    if sum(len(k) + len(v) for k, v in items.items()) > MAX_VARIABLE_BYTES:
        raise VariableError(500, "variables are limited to 64KiB in total size")
    if not _PATH.fullmatch(path):
        raise VariableError(500, f'invalid path "{path}"')
    parts = path.split("/")
    if parts[0] == "nomad" and (len(parts) == 1 or parts[1] not in ("jobs", "job-templates")):
        raise VariableError(500, '"nomad" is a reserved top-level directory path, but you may write variables '
                                 'to "nomad/jobs", "nomad/job-templates", or below')


@dataclass
class VariableStore:
    """The Variables of every namespace, by (namespace, path); writes take the cluster's raft index."""

    next_index: Callable[[], int]
    clock: Callable[[], float] = time.time
    _vars: dict[tuple[str, str], JSON] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, namespace: str, path: str) -> JSON:
        with self._lock:
            found = self._vars.get((namespace, path))
            if found is None:
                raise VariableError(404, "variable not found")
            return {**found, "Items": dict(found["Items"])}

    def put(self, namespace: str, path: str, items: Any, cas: int | None, can_read: bool) -> tuple[int, JSON]:
        """(status, body): 200 and the written Variable, or 409 and the one in the way (items only if readable)."""
        check_variable(namespace, path, items)
        with self._lock:
            current = self._vars.get((namespace, path))
            conflict = self._conflict(namespace, path, current, cas, can_read)
            if conflict is not None:
                return 409, conflict
            now = int(self.clock() * 1e9)
            index = self.next_index()
            meta = {"Namespace": namespace, "Path": path, "CreateIndex": index, "ModifyIndex": index,
                    "CreateTime": now, "ModifyTime": now, "Lock": None}
            if current is not None:
                meta["CreateIndex"], meta["CreateTime"] = current["CreateIndex"], current["CreateTime"]
            self._vars[(namespace, path)] = {**meta, "Items": dict(items)}
            return 200, {**meta, "Items": dict(items)}

    def delete(self, namespace: str, path: str, cas: int | None, can_read: bool) -> tuple[int, JSON | None]:
        with self._lock:
            current = self._vars.get((namespace, path))
            conflict = self._conflict(namespace, path, current, cas, can_read)
            if conflict is not None:
                return 409, conflict
            if current is not None:
                self.next_index()
                del self._vars[(namespace, path)]
            return 204, None

    def list(self, namespace: str, prefix: str, allowed: Callable[[str, str], bool]) -> list[JSON]:
        """Metadata only, never items, of the Variables the caller may list (`*`: every namespace)."""
        with self._lock:
            return [{k: v for k, v in var.items() if k != "Items"}
                    for (ns, path), var in sorted(self._vars.items())
                    if (namespace in ("*", ns)) and path.startswith(prefix) and allowed(ns, path)]

    @staticmethod
    def _conflict(namespace: str, path: str, current: JSON | None, cas: int | None, can_read: bool) -> JSON | None:
        """`?cas=N`: 0 means "only if absent", N the index it must still have (state_store_variables.go)."""
        if cas is None:
            return None
        if current is None:
            if cas == 0:
                return None
            return {"Namespace": namespace, "Path": path, "CreateIndex": 0, "ModifyIndex": 0, "CreateTime": 0,
                    "ModifyTime": 0, "Items": None}
        if current["ModifyIndex"] == cas:
            return None
        return {**current, "Items": dict(current["Items"]) if can_read else None}


@dataclass
class Identities:
    """Workload identities the dev cluster's "client" holds for its running allocations."""

    _claims: dict[str, WorkloadClaim] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self, claim: WorkloadClaim) -> str:
        secret = "wi-" + secrets.token_hex(16)
        with self._lock:
            self._claims[secret] = claim
        return secret

    def claim(self, secret: str | None) -> WorkloadClaim | None:
        with self._lock:
            return self._claims.get(secret or "")


__all__ = ["MAX_VARIABLE_BYTES", "Identities", "VariableError", "VariableStore", "WorkloadClaim", "check_variable"]
