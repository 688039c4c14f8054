"""ACL policies and tokens written as an operator writes them for Nomad, so a policy can be rehearsed here.

A cluster file's `acl:` section (or `nomad-gpu dev-cluster --acl-file`) names policies in Nomad's own HCL
(the text `nomad acl policy apply` takes, e.g. docs/nomad-acl.md's policy for the service) and tokens
bound to them, as `nomad acl token create -type client -policy ...` binds them:

    acl:
      policies:
        nomad-gpu-service: nomad-gpu-service.policy.hcl   # a file beside this one, or the HCL itself
      tokens:
        - {name: nomad-gpu service, secret: 0b6d..., policies: [nomad-gpu-service]}
        - {name: operator, secret: 7f3a..., type: management}

A policy is checked as Nomad checks it on `apply` (`acl/policy.go` `Parse`, strict, v2.0.5): each namespace's
`policy` is deny, read, write or scale and each capability one Nomad knows (the fine-grained `register-job`,
`deregister-job` and their siblings only from 1.11.2, where Nomad added them); the node, agent, operator,
quota and plugin policies are checked for their words; any other key is refused. A token's policies merge as
Nomad merges them (`acl/acl.go` `NewACL`): capabilities add up, `deny` wins, the node policy is the most
privileged unless one denies. What the dev cluster then enforces is what acl.py models (namespaces, node read,
Variables, management); agent, operator, quota, plugin, node_pool and host_volume rules are checked, not
enforced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .acl import AclToken
from .hcl import parse_hcl_tree
from .hclbody import Body, HclError
from .version import NomadVersion

_NAMESPACE_WORDS = ("deny", "read", "write", "scale")
_SCALE = ("list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job", "read-job",
          "submit-recommendation")
"""`expandNamespacePolicy` for `scale` (acl/policy.go, v2.0.5)."""
_CAPABILITIES = frozenset({
    "deny", "list-jobs", "parse-job", "read-job", "submit-job", "dispatch-job", "read-logs", "read-fs", "alloc-exec",
    "alloc-node-exec", "alloc-lifecycle", "csi-register-plugin", "csi-write-volume", "csi-read-volume",
    "csi-list-volume", "csi-mount-volume", "host-volume-create", "host-volume-register", "host-volume-read",
    "host-volume-write", "host-volume-delete", "list-scaling-policies", "read-scaling-policy", "read-job-scaling",
    "scale-job", "sentinel-override", "submit-recommendation"})
"""`isNamespaceCapabilityValid` (acl/policy.go) before 1.11.2."""
_FINE_GRAINED = frozenset({
    "register-job", "revert-job", "deregister-job", "purge-job", "evaluate-job", "plan-job", "tag-job-version",
    "stable-job", "fail-deployment", "pause-deployment", "promote-deployment", "unblock-deployment",
    "cancel-deployment", "set-alloc-health-deployment", "gc-allocation", "pause-allocation", "force-periodic-job",
    "delete-service-registration"})
"""The capabilities split out of submit-job in 1.11.2 (acl/policy.go at v1.11.2 and v2.0.x, absent at v1.11.1)."""
FINE_GRAINED_SINCE = NomadVersion.parse("1.11.2")
_PATH_CAPABILITIES = ("write", "read", "list", "destroy", "deny")
_NAMESPACE_NAME = re.compile(r"[a-zA-Z0-9*-]{1,128}")
_NODE_RANK = {"read": 1, "scale": 1, "write": 2}


class AclPolicyError(ValueError):
    """A policy or token Nomad would refuse; the message is Nomad's words where it has some."""


class TokenSpec(BaseModel):
    """One token: its secret, and a management token or a client token's policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="", max_length=256)
    secret: str = Field(min_length=8, max_length=128, pattern=r"^\S+$")
    type: Literal["client", "management"] = "client"
    policies: tuple[str, ...] = ()


class AclSpec(BaseModel):
    """A cluster file's `acl:` section, or an `--acl-file`: policies by name (HCL) and tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policies: dict[str, str] = Field(default_factory=dict)
    tokens: tuple[TokenSpec, ...] = Field(min_length=1)


def read_policy_files(raw: Any, base: Path) -> Any:
    """The `acl:` mapping with each policy given as a `*.hcl` file name replaced by that file's text (a
    relative name is read beside the file that names it)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("policies"), Mapping):
        return raw
    policies = {}
    for name, value in raw["policies"].items():
        if isinstance(value, str) and "\n" not in value and value.strip().endswith(".hcl"):
            path = base / value.strip()
            try:
                value = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise AclPolicyError(f"acl: policies: {name}: cannot read {path}: {exc.strerror or exc}") from exc
        policies[name] = value
    return {**raw, "policies": policies}


def load_acl_file(path: str | Path, version: NomadVersion) -> list[AclToken]:
    """`--acl-file`: a YAML file holding what a cluster file's `acl:` section holds."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AclPolicyError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise AclPolicyError(f"{path}: not valid YAML: {exc}") from exc
    try:
        spec = AclSpec.model_validate(read_policy_files(data, path.parent))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise AclPolicyError(f"{path}: {where}: {first['msg']}") from exc
    return tokens_of(spec, version, source=str(path))


def tokens_of(spec: AclSpec, version: NomadVersion, source: str = "acl") -> list[AclToken]:
    """The tokens, each with its policies parsed and merged; AclPolicyError naming what Nomad would refuse."""
    parsed = {name: parse_policy(text, version, f"{source}: policy {name!r}") for name, text in spec.policies.items()}
    out, secrets = [], set()
    for token in spec.tokens:
        if token.secret in secrets:
            raise AclPolicyError(f"{source}: token {token.name!r}: its secret is another token's too")
        secrets.add(token.secret)
        if token.type == "management":
            if token.policies:
                raise AclPolicyError(f"{source}: token {token.name!r}: Management tokens cannot be associated "
                                     "with policies")  # structs.ACLToken.Validate (nomad/structs, v2.0.5)
            out.append(AclToken(token.secret, management=True))
            continue
        if not token.policies:
            raise AclPolicyError(f"{source}: token {token.name!r}: Client tokens must be associated with at "
                                 "least one policy or role")
        unknown = [p for p in token.policies if p not in parsed]
        if unknown:
            raise AclPolicyError(f"{source}: token {token.name!r}: policy {unknown[0]!r} does not exist")
        out.append(_merged(token.secret, (parsed[p] for p in token.policies)))
    return out


@dataclass(frozen=True)
class Policy:
    """One parsed policy: capabilities by namespace, Variables rules, and its node policy (None: no node block)."""

    namespaces: Mapping[str, tuple[str, ...]]
    variables: Mapping[str, Mapping[str, tuple[str, ...]]]
    node: str | None


def parse_policy(text: str, version: NomadVersion, where: str = "policy") -> Policy:
    """One policy's rules, or AclPolicyError."""
    try:
        top = Body(parse_hcl_tree(text), where)
        rules: dict[str, tuple[str, ...]] = {}
        variables: dict[str, dict[str, tuple[str, ...]]] = {}
        for (name,), ns in top.blocks("namespace", 1):
            if not _NAMESPACE_NAME.fullmatch(name):
                raise AclPolicyError(f"{where}: Invalid namespace name: {name!r}")
            rules[name] = rules.get(name, ()) + _namespace(ns, name, version, where, variables)
            ns.finish()
        node = _word(top, "node", ("deny", "read", "write", "scale"), where)
        for block in ("agent", "quota"):
            _word(top, block, ("deny", "read", "write", "scale"), where)
        _word(top, "plugin", ("deny", "read", "list", "write"), where)
        _word(top, "operator", ("deny", "read", "write", "scale"), where, capabilities=("deny", "snapshot-save",
                                                                                           "license-read"))
        for block, caps in (("node_pool", ("delete", "deny", "read", "write")),
                            ("host_volume", ("deny", "mount-readonly", "mount-readwrite"))):
            for (_label,), body in top.blocks(block, 1):
                _checked(body, block, caps, where)
        top.finish()
    except HclError as exc:
        raise AclPolicyError(f"{where}: Failed to parse ACL Policy: {exc}") from exc
    if not rules and node is None and not text.strip():
        raise AclPolicyError(f"{where}: Invalid policy: it is empty")
    return Policy(rules, variables, node)


def _namespace(ns: Body, name: str, version: NomadVersion, where: str,
               variables: dict[str, dict[str, tuple[str, ...]]]) -> tuple[str, ...]:
    word = ns.string("policy")
    if word is not None and word not in _NAMESPACE_WORDS:
        raise AclPolicyError(f"{where}: Invalid namespace policy {word!r} in namespace {name!r}")
    caps = tuple(ns.string_list("capabilities") or ())
    known = _CAPABILITIES | (_FINE_GRAINED if version >= FINE_GRAINED_SINCE else frozenset())
    for cap in caps:
        if cap not in known:
            since = f" (Nomad {version} does not know it; it came in 1.11.2)" if cap in _FINE_GRAINED else ""
            raise AclPolicyError(f"{where}: Invalid namespace capability '{cap}' in namespace {name!r}{since}")
    block = ns.single_block("variables")
    if block is not None:
        paths = block.blocks("path", 1)
        if not paths:
            raise AclPolicyError(f"{where}: Invalid variable policy: no variable paths in namespace {name}")
        for (spec,), path in paths:
            if spec.startswith("/"):
                raise AclPolicyError(f"{where}: Invalid variable path {spec!r} in namespace {name}: cannot start "
                                     "with a leading '/'")
            path_caps = tuple(path.string_list("capabilities") or ())
            bad = [c for c in path_caps if c not in _PATH_CAPABILITIES]
            if bad:
                raise AclPolicyError(f"{where}: Invalid variable capability '{bad[0]}' in namespace {name}")
            variables.setdefault(name, {})[spec] = variables.get(name, {}).get(spec, ()) + path_caps
            path.finish()
        block.finish()
    if word == "scale":
        return caps + _SCALE  # acl.py expands read, write and deny by name
    return caps + ((word,) if word is not None else ())


def _word(top: Body, block: str, words: tuple[str, ...], where: str,
          capabilities: tuple[str, ...] = ()) -> str | None:
    body = top.single_block(block)
    if body is None:
        return None
    return _checked(body, block, capabilities, where, words)


def _checked(body: Body, block: str, capabilities: tuple[str, ...], where: str,
             words: tuple[str, ...] = ("deny", "read", "write", "scale")) -> str | None:
    word = body.string("policy")
    if word is not None and word not in words:
        raise AclPolicyError(f"{where}: Invalid {block} policy {word!r}")
    if capabilities:
        bad = [c for c in body.string_list("capabilities") or () if c not in capabilities]
        if bad:
            raise AclPolicyError(f"{where}: Invalid {block} capability '{bad[0]}'")
    body.finish()
    return word


def _merged(secret: str, policies: Iterable[Policy]) -> AclToken:
    rules: dict[str, tuple[str, ...]] = {}
    variables: dict[str, dict[str, tuple[str, ...]]] = {}
    nodes: list[str] = []
    for policy in policies:
        for ns, caps in policy.namespaces.items():
            rules[ns] = rules.get(ns, ()) + caps
        for ns, paths in policy.variables.items():
            for path, caps in paths.items():
                variables.setdefault(ns, {})[path] = variables.get(ns, {}).get(path, ()) + caps
        if policy.node is not None:
            nodes.append(policy.node)
    node = "deny" if not nodes or "deny" in nodes else max(nodes, key=lambda w: _NODE_RANK.get(w, 0))
    return AclToken(secret, rules, node=node, variables=variables)
