"""What a `nomad-gpu node mig apply` task does to a dev-cluster node, and when Nomad sees it.

The dev cluster runs no commands; a task "runs" for its duration and exits. For one task, though, the
exit is not all: the apply command changes the node's MIG layout (devcluster/miglayout.py `apply`,
which refuses as NVML does). The change is on the node at once, but Nomad's node shows it only after
the device plugin's next fingerprint and the client's node update (the delay is the node's
`mig_fingerprint_delay_s`, else the worst case of its plugin's period plus `nodeUpdateRetryIntv` and
its stagger: client/client.go `watchNodeUpdates`, `retryIntv`, v2.0.5). Then the node is re-registered
(`Node.Register` -> a `NodeRegistration` event, nomad/state/events.go v2.0.5) and blocked work is
scheduled again. A node that goes down first never re-registers with the change until it is back.

The audit gets `mig_changes` (one record per change, when the node changed, not when Nomad saw it) and
`mig_destroyed_in_use` (instances destroyed while an allocation held them: must stay 0).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .allocs import Alloc, ClientStatus
from .inventory import refingerprint_mig
from .miglayout import NODE_UPDATE_WORST_S, PLUGIN_PERIOD_S, apply, apply_command, fresh_id

if TYPE_CHECKING:
    from .state import ClusterState

logger = logging.getLogger(__name__)


@dataclass
class MigLog:
    changes: list[dict[str, Any]] = field(default_factory=list)
    destroyed_in_use: int = 0
    serial: int = 0
    waiting: dict[str, int] = field(default_factory=dict)
    """Node ID -> changes made on the node that Nomad has not seen yet."""

    def audit(self) -> dict[str, Any]:
        return {"mig_changes": [dict(c) for c in self.changes], "mig_destroyed_in_use": self.destroyed_in_use}


def task_exit(state: ClusterState, alloc: Alloc, code: int) -> int:
    """The exit code of `alloc`'s task, after doing what its `node mig apply` does (if it runs one).
    Called with the state locked, when the task exits by itself; `code` is what it would exit with
    otherwise (1 when the job asks the dev cluster to fail it: then the command failed before any change)."""
    record = state.jobs.get((alloc.namespace, alloc.job_id))
    if record is None:
        return code
    group = next((g for g in record.job.get("TaskGroups") or [] if g.get("Name") == alloc.task_group), None)
    commands = [c for t in (group or {}).get("Tasks") or [] if (c := apply_command(t)) is not None]
    if not commands or code != 0:
        return code
    node = state.nodes.get(alloc.node_id)
    log: MigLog = state.mig_log
    out = 0
    for cmd in commands:
        gpu = next((g for g in node.mig_gpus if g.uuid == cmd.gpu), None) if node is not None else None
        if node is None or gpu is None:
            return 2  # "no GPU ... on this node"
        holders = {i: a.client_status is ClientStatus.RUNNING
                   for a in state.live_by_node.get(node.id, {}).values() if a.id != alloc.id
                   for choice in a.devices for i in choice.ids}

        def new_id(node_id: str = node.id, uuid: str = gpu.uuid) -> str:
            log.serial += 1
            return fresh_id(node_id, uuid, log.serial)

        outcome = apply(gpu, cmd, holders, new_id)
        if outcome.after != outcome.before:
            log.changes.append({"node": node.name, "gpu": gpu.uuid, "before": outcome.before, "after": outcome.after,
                                "at": state.clock()})
            log.destroyed_in_use += outcome.destroyed_in_use
            log.waiting[node.id] = log.waiting.get(node.id, 0) + 1
            delay = _delay(node.mig_fingerprint_delay_s, node.device_plugin)
            if delay != float("inf"):
                state.timers.call_at(state.clock() + delay / state.speed,
                                     functools.partial(_refingerprint, state, node.id))
        if outcome.exit_code:
            logger.info("node mig apply on %s exits %d: %s", node.name, outcome.exit_code, outcome.message)
            return outcome.exit_code
        out = outcome.exit_code
    return out


def _delay(configured: float | str | None, plugin: str) -> float:
    if configured == "never":
        return float("inf")
    if isinstance(configured, (int, float)):
        return float(configured)
    return PLUGIN_PERIOD_S.get(plugin, 60.0) + NODE_UPDATE_WORST_S


def _refingerprint(state: ClusterState, node_id: str) -> None:
    with state.lock:
        node = state.nodes.get(node_id)
        if node is None or node.status != "ready" or not state.mig_log.waiting.get(node_id):
            return  # a down node re-registers when it is back (then it carries the change: see set_status)
        state.mig_log.waiting[node_id] = 0
        refingerprint_mig(node)
        index = state._next_index()
        node.modify_index = index
        state._emit(index, [node.event("NodeRegistration")])
        state._schedule()


def catch_up(state: ClusterState, node_id: str) -> None:
    """A node coming back up fingerprints what its GPUs have now."""
    if state.mig_log.waiting.get(node_id):
        state.mig_log.waiting[node_id] = 0
        refingerprint_mig(state.nodes[node_id])
