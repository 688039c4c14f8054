"""ACLs, as far as a token with namespace policies is refused by Nomad: enough to test a service whose
token lacks a capability.

Off unless tokens are given. Then every request is judged by its `X-Nomad-Token` (none: the anonymous
token, with no policy): an unknown secret is 403 "ACL token not found" and a missing capability 403
"Permission denied" (`command/agent/http.go` `wrap`, `nomad/structs/errors.go`, v2.0.5). A namespace
policy is a policy word (`read`, `write`, `deny`: `acl/policy.go` `expandNamespacePolicy`) or a list of
capabilities; it applies to the namespace it names, or to a glob (`*`, `ml-*`), the closest glob
winning (`acl/acl.go` `findClosestMatchingGlob`). Lists asked for `namespace=*` keep only the namespaces
the token may read (`nomad/alloc_endpoint.go` `List`, `allowedNSes`).

The event stream is judged by `stream_allowed` (`nomad/event_endpoint.go` `validateNsOp`): read-job in
EVERY namespace that `*` expands to for the Job, Allocation and Evaluation topics, node read for Node.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

PERMISSION_DENIED = "Permission denied"
TOKEN_NOT_FOUND = "ACL token not found"

_READ = ("list-jobs", "parse-job", "read-job", "csi-list-volume", "csi-read-volume", "read-job-scaling",
         "list-scaling-policies", "read-scaling-policy", "host-volume-read")
_WRITE = _READ + ("scale-job", "submit-job", "dispatch-job", "read-logs", "read-fs", "alloc-exec",
                  "alloc-lifecycle", "csi-mount-volume", "csi-write-volume", "submit-recommendation",
                  "host-volume-create")
_POLICIES = {"read": _READ, "write": _WRITE, "deny": ("deny",)}
"""`expandNamespacePolicy` (acl/policy.go, v2.0.5)."""


@dataclass(frozen=True)
class AclToken:
    """A token's secret and what its policies grant."""

    secret: str
    namespaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Namespace name or glob -> policy words and capabilities."""
    node: str = "deny"  # the node policy: deny, read or write
    management: bool = False
    variables: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    """Namespace name or glob -> Variable path or glob -> capabilities (read, write, list, destroy, deny):
    a namespace's `variables { path "..." { capabilities = [...] } }` blocks."""

    def capabilities(self, namespace: str) -> frozenset[str]:
        rules = self.namespaces.get(namespace)
        if rules is None:
            globs = [g for g in self.namespaces if "*" in g and fnmatch.fnmatchcase(namespace, g)]
            if not globs:
                return frozenset()
            rules = self.namespaces[min(globs, key=lambda g: len(namespace) - len(g.replace("*", "")))]
        caps = {cap for rule in rules for cap in _POLICIES.get(rule, (rule,))}
        return frozenset() if "deny" in caps else frozenset(caps)

    def allows(self, namespace: str, capability: str) -> bool:
        return self.management or capability in self.capabilities(namespace)

    def allows_variable(self, namespace: str, path: str, capability: str) -> bool:
        """`AllowVariableOperation` (acl/acl.go, v2.0.5): the namespace's closest rule, then its exact path or
        closest path glob; `read` implies `list` (acl/policy.go `expandVariablesCapabilities`), `deny` wins."""
        if self.management:
            return True
        paths = self.variables.get(namespace) or _closest(namespace, self.variables)
        caps = paths.get(path) if paths else None
        if caps is None and paths:
            caps = _closest(path, paths)
        if not caps or "deny" in caps:
            return False
        return capability in caps or (capability == "list" and "read" in caps)

    def node_read(self) -> bool:
        return self.management or self.node in ("read", "write")


def _closest(name: str, rules: Mapping[str, Any]) -> Any:
    """The glob that matches `name` with the fewest characters left to the wildcard (`findClosestMatchingGlob`)."""
    globs = [g for g in rules if "*" in g and fnmatch.fnmatchcase(name, g)]
    return rules[min(globs, key=lambda g: len(name) - len(g.replace("*", "")))] if globs else None


class TokenNotFound(Exception):
    pass


class Acl:
    """The tokens Nomad knows; `enabled` is false without any."""

    def __init__(self, tokens: Iterable[AclToken] = ()) -> None:
        self._tokens = {t.secret: t for t in tokens}

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def resolve(self, secret: str | None) -> AclToken:
        if not secret:
            return AclToken("")  # anonymous: no policy unless one is attached (none here)
        token = self._tokens.get(secret)
        if token is None:
            raise TokenNotFound(TOKEN_NOT_FOUND)
        return token

    def readable(self, secret: str | None, namespaces: Iterable[str], capability: str = "read-job") -> set[str]:
        """The namespaces a `namespace=*` list keeps for this token."""
        token = self.resolve(secret)
        return {ns for ns in namespaces if token.allows(ns, capability)}

    def stream_allowed(self, secret: str | None, topics: Iterable[str], namespaces: Iterable[str]) -> bool:
        """`validateACL` and `validateNsOp` (nomad/event_endpoint.go, v2.0.5)."""
        try:
            token = self.resolve(secret)
        except TokenNotFound:
            return False
        for topic in topics:
            if topic in ("Job", "Allocation", "Evaluation", "Deployment", "Service"):
                if not all(token.allows(ns, "read-job") for ns in namespaces):
                    return False
            elif topic == "Node":
                if not token.node_read():
                    return False
            elif not token.management:  # "*" and the rest: management only
                return False
        return True


Need = tuple[str, str] | None
"""(namespace, capability), ("", "node-read"), ("", "management"), or None: no check."""


def requirement(request: Request, alloc_namespace: Callable[[str], str | None]) -> list[Need]:
    """What a request needs (the endpoints' ACL checks in `nomad/*_endpoint.go`, v2.0.5)."""
    path, method = request.url.path, request.method
    ns = request.query_params.get("namespace") or "default"
    parts = path.strip("/").split("/")
    if (path.startswith(("/_dev/", "/v1/var/")) or path in ("/v1/status/leader", "/v1/event/stream", "/v1/namespaces",
                                                             "/v1/vars")):
        return [None]  # the stream, the namespace list and Variables (varroutes.py) judge themselves
    if parts[:2] in (["v1", "nodes"], ["v1", "node"]) or path == "/v1/agent/members":
        return [("", "node-read")]  # `Status.Members` checks AllowNodeRead (nomad/status_endpoint.go v2.0.3)
    if path == "/v1/jobs/parse":  # parse-job or submit-job (command/agent/job_endpoint.go `JobsParseRequest`)
        return [(ns, "parse-job|submit-job")]
    # registering takes submit-job or register-job, stopping deregister-job, purging purge-job (`Register` ->
    # `doRegister`, `Deregister`, nomad/job_endpoint.go, v2.0.5; the fine-grained ones exist from 1.11.2 and a
    # policy naming them earlier is refused when it is read, aclpolicy.py)
    if path == "/v1/jobs":
        return [(ns, "submit-job|register-job")] if method in ("POST", "PUT") else (
            [None] if ns == "*" else [(ns, "list-jobs")])
    if parts[:2] == ["v1", "job"]:
        if method == "DELETE":
            purge = request.query_params.get("purge") in ("true", "1")
            return [(ns, "submit-job|purge-job" if purge else "submit-job|deregister-job|purge-job")]
        return [(ns, "submit-job|register-job" if method in ("POST", "PUT") else "read-job")]
    if parts[:2] in (["v1", "evaluations"], ["v1", "evaluation"]):
        return [None] if ns == "*" else [(ns, "read-job")]
    if path == "/v1/allocations":
        return [None] if ns == "*" else [(ns, "read-job")]
    if parts[:2] == ["v1", "allocation"] and len(parts) >= 3:
        owner = alloc_namespace(parts[2]) or ns
        return [(owner, "alloc-lifecycle" if parts[-1] == "stop" else "read-job")]
    if parts[:3] == ["v1", "client", "fs"] and len(parts) >= 5:
        return [(alloc_namespace(parts[4]) or ns, "read-logs")]
    if parts[:3] == ["v1", "client", "allocation"] and len(parts) >= 4:
        return [(alloc_namespace(parts[3]) or ns, "read-job")]
    if path == "/v1/services" or parts[:2] == ["v1", "service"]:  # nomad/service_registration_endpoint.go
        return [None] if ns == "*" else [(ns, "read-job")]
    if parts[:2] == ["v1", "namespace"]:
        return [("", "management")] if method != "GET" else [(parts[2] if len(parts) > 2 else ns, "list-jobs")]
    return [("", "management")]  # system endpoints (GC, ...)


class AclGate:
    """ASGI middleware: refuses what the token may not do, as Nomad's HTTP layer writes it."""

    def __init__(self, app: ASGIApp, acl: Acl, alloc_namespace: Callable[[str], str | None]) -> None:
        self.app, self.acl, self.alloc_namespace = app, acl, alloc_namespace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.acl.enabled:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, request: Request) -> Response | None:
        needs = requirement(request, self.alloc_namespace)
        if all(need is None for need in needs):
            return None  # unguarded, or it judges the token itself (the stream: after its 200 from 1.11.2)
        try:
            token = self.acl.resolve(request.headers.get("x-nomad-token"))
        except TokenNotFound:
            return PlainTextResponse(TOKEN_NOT_FOUND, status_code=403)
        for need in needs:
            if need is None:
                continue
            namespace, capability = need
            allowed = (token.node_read() if capability == "node-read" else token.management
                       if capability == "management"
                       else any(token.allows(namespace, one) for one in capability.split("|")))
            if not allowed:
                return PlainTextResponse(PERMISSION_DENIED, status_code=403)
        return None


def token_of(request: Request) -> str | None:
    return request.headers.get("x-nomad-token")

