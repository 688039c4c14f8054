"""The one Nomad node pool a submission runs in, chosen where the caller's rights are known.

A spec that names no pool is not free to run anywhere: Nomad puts such a job in its namespace's
default pool (Enterprise: the namespace's `node_pool_config.default`, website/content/docs/
other-specifications/namespace.mdx, v1.10.5) or else in `default` (`jobNodePoolMutatingHook`,
nomad/job_endpoint_hook_node_pool_ce.go, v2.0.5 and v1.10.5), and scans only that pool's nodes
(`scheduler/util.go` readyNodesInDCsAndPool, v2.0.5; the built-in `all` pool is every node). Leaving it
open let a token granted `[default]` land in `reserved` (issue 31, item 1). So the pool is decided at
submit, checked against the service's and the token's allowlists, and bound into the stored spec: the
placement, the fleet check and the rendered job then all see the same single pool.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from nomad_gpu.domain.errors import NomadGpuError, NotAllowed
from nomad_gpu.service.config.settings import AccessSettings

logger = logging.getLogger(__name__)

DEFAULT_POOL = "default"
"""`structs.NodePoolDefault` (nomad/structs/node_pool.go, v2.0.5)."""
ALL_POOL = "all"
"""`structs.NodePoolAll`: every node of the cluster, whatever its pool."""


def job_pool(named: str | None, namespace_default: str | None) -> str:
    """The pool Nomad runs a job in: the one it names, else its namespace's default, else `default`."""
    return named or namespace_default or DEFAULT_POOL


def allowed_pool(named: str | None, namespace_default: str | None, rules: AccessSettings) -> str:
    """`job_pool`, when the rules (already narrowed to the caller's grant) open it; NotAllowed otherwise."""
    pool = job_pool(named, namespace_default)
    if "*" in rules.node_pools or pool in rules.node_pools:
        return pool
    why = "" if named else (f" (the spec names no node_pool: its namespace's default pool is {pool!r})"
                            if namespace_default else " (the spec names no node_pool: Nomad's `default`)")
    raise NotAllowed(f"node_pool: {pool!r} is not open to these submissions{why} (allowed: "
                     f"{', '.join(sorted(rules.node_pools))}; see node_pools in the service config)")


def namespace_default_pool(namespace: Any) -> str | None:
    """`NodePoolConfiguration.Default` of a namespace as Nomad's `GET /v1/namespace/:name` answers it
    (`structs.Namespace`, nomad/structs/structs.go, v2.0.5); None when it has none (always, on Nomad CE)."""
    if not isinstance(namespace, dict):
        return None
    config = namespace.get("NodePoolConfiguration")
    default = config.get("Default") if isinstance(config, dict) else None
    return default if isinstance(default, str) and default else None


class NamespacePools:
    """Each namespace's default pool, read from Nomad and kept `ttl_s`, so that a burst of submissions
    does not become a burst of reads. Nomad unreachable: None (the job then goes to `default`, which the
    allowlists still judge; a pool a namespace refuses is then refused by Nomad at register)."""

    def __init__(self, read: Callable[[str], Any], ttl_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.read, self.ttl_s, self.clock = read, ttl_s, clock
        self._known: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, namespace: str) -> str | None:
        now = self.clock()
        with self._lock:
            seen = self._known.get(namespace)
        if seen is not None and now - seen[0] < self.ttl_s:
            return seen[1]
        try:
            pool = namespace_default_pool(self.read(namespace))
        except NomadGpuError as exc:
            logger.debug("namespace %s not read (%s); its jobs without a node_pool go to `default`", namespace, exc)
            pool = None
        with self._lock:
            self._known[namespace] = (now, pool)
        return pool
