"""Node faults and drains: what happens to allocations when a node goes down or is drained.

Kept apart from `state.py` (which stays the small write path) because this is where Nomad's
versions differ and where a companion is most easily fooled: a drained allocation ends with client
status `complete`, exactly like a task that succeeded, and may or may not be replaced.

- Down: live allocations become `lost` and are replaced (`scheduler/reconcile.go`).
- Drain (`nomad/drainer/`, v1.10.5 and v1.11.2; `command/agent/node_endpoint.go`): the node turns
  ineligible at once; service allocations are migrated at once (`DesiredTransition.Migrate`, stopped
  as "alloc is being migrated", a replacement placed elsewhere); batch allocations may run until the
  deadline (`nomad/drainer/watch_jobs.go` handleTaskGroup), when every allocation left is force
  stopped. From 1.11 the drainer marks batch allocations `MigrateDisablePlacement`, so no replacement
  is placed for them (`nomad/drainer/drainer.go` drainAllocs, v1.11.2;
  `scheduler/reconciler/reconcile_cluster.go`); 1.10.x and earlier replace them too
  (`scheduler/reconcile.go` v1.10.5). A drain completes once nothing it must move is left on the node
  (at once on an empty node, when the last batch allocation ends, or at the deadline): no
  DrainStrategy, still ineligible, `LastDrain.Status: complete` (`nomad/drainer/draining_node.go`
  IsDone, `nomad/drainer/drainer.go`).
- A replacement pinned to the drained node (or to its devices) cannot be placed anywhere else, so it
  waits in a blocked evaluation and lands as soon as the node is eligible again: the hazard a
  companion must stop its job to avoid.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from . import evals, migjobs
from .allocs import Alloc, ClientStatus
from .clienttruth import report
from .inventory import Node

if TYPE_CHECKING:
    from .state import ClusterState

logger = logging.getLogger(__name__)

DEFAULT_DRAIN_DEADLINE_S = 3600.0  # `nomad node drain -deadline` default (`command/node_drain.go`)
STATUS_MIGRATING = "alloc is being migrated"  # `scheduler/structs/const.go`, v2.0.5
STATUS_LOST = "alloc is lost since its node is down"


def plays_at_least(version: object, wanted: tuple[int, ...]) -> bool:
    """Whether a Nomad version string such as "2.0.5" or "1.10.5+ent" is `wanted` or later."""
    parts = []
    for part in str(version).lstrip("v").split("+")[0].split("-")[0].split("."):
        parts.append(int(part) if part.isdigit() else 0)
    return tuple(parts) >= wanted


def set_status(state: ClusterState, id_or_name: str, status: str) -> Node:
    with state.lock:
        node = state.resolve_node(id_or_name)
        if node.status == status:
            return node
        if status == "ready":
            migjobs.catch_up(state, node.id)  # back up: its plugin fingerprints the GPUs as they are now
        index = state._next_index()
        node.status, node.modify_index, node.status_updated_at = status, index, int(state.clock())
        # Status changes are `NodeStreamEvent`, not the documented "NodeEvent" (reference section 1).
        state._emit(index, [node.event("NodeStreamEvent")])
        if status == "ready":  # its client restores what the servers stopped while it was gone and reports it
            # ended, overwriting `lost` (`nestedUpdateAllocFromClient`, nomad/state/state_store.go, v2.0.5):
            # the tasks of a node that died ended with it; a cut-off node's are reported by partitions.py
            for alloc in [a for a in state.allocs.values() if a.node_id == node.id and a.late_report is None
                          and a.client_status is ClientStatus.LOST and a.task_ended_at is not None]:
                report(state, alloc, ClientStatus.COMPLETE)
        if status == "down":
            lost = [a for a in state.live.values() if a.node_id == node.id]
            if lost:
                replace = [a for a in lost if a.desired_status == "run" and state._replaceable(a)]
                for alloc in lost:
                    alloc.desired_status, alloc.desired_description = "stop", STATUS_LOST
                    alloc.lost_at = state.clock()
                state._finish(lost, ClientStatus.LOST)
                for alloc in replace:  # Nomad replaces lost allocations
                    state._requeue(alloc, evals.NODE_UPDATE)
        state._schedule()
        return node


def set_eligibility(state: ClusterState, id_or_name: str, eligible: bool) -> Node:
    with state.lock:
        node = state.resolve_node(id_or_name)
        index = state._next_index()
        node.eligibility, node.modify_index = ("eligible" if eligible else "ineligible"), index
        state._emit(index, [node.event("NodeEligibility")])
        state._schedule()
        return node


def set_drain(state: ClusterState, id_or_name: str, drain: bool, deadline_s: float | None = None) -> Node:
    """Drain on (with a deadline in seconds of the cluster's clock) or off."""
    deadline = DEFAULT_DRAIN_DEADLINE_S if deadline_s is None else deadline_s
    if deadline < 0:
        raise ValueError("a drain deadline cannot be negative")
    with state.lock:
        node = state.resolve_node(id_or_name)
        now = state.clock()
        index = state._next_index()
        node.set_drain(drain, now, deadline)
        node.modify_index = index
        state._emit(index, [node.event("NodeDrain")])
        if drain:
            running = [a for a in state.live.values() if a.node_id == node.id and a.desired_status == "run"]
            services = [a for a in running if a.job_type != "batch"]
            if services:
                _migrate(state, services, deadlined=False)
            state.timers.call_at(now + deadline, functools.partial(_deadline, state, node.id, node.drain_epoch))
            settle_drains(state, {node.id})
        state._schedule()
        return node


def settle_drains(state: ClusterState, node_ids: set[str]) -> None:
    """Complete the drain of each of these nodes that has nothing left to move."""
    for node_id in node_ids:
        node = state.nodes.get(node_id)
        if node is None or node.drain_strategy is None:
            continue
        if any(a.node_id == node_id and a.desired_status == "run" for a in state.live.values()):
            continue
        index = state._next_index()
        node.finish_drain(state.clock())
        node.modify_index = index
        state._emit(index, [node.event("NodeDrain")])


def _deadline(state: ClusterState, node_id: str, epoch: int) -> None:
    """The drain deadline: force stop what is left (`nomad/drainer/drainer.go` handleDeadlinedNodes)."""
    with state.lock:
        node = state.nodes.get(node_id)
        if node is None or node.drain_strategy is None or node.drain_epoch != epoch:
            return  # undrained, or drained again since
        left = [a for a in state.live.values() if a.node_id == node.id and a.desired_status == "run"]
        if left:
            _migrate(state, left, deadlined=True)  # the drain completes when the last one has stopped
        settle_drains(state, {node.id})
        state._schedule()


def _migrate(state: ClusterState, allocs: list[Alloc], *, deadlined: bool) -> None:
    """Mark allocations `Migrate` (one node-drain evaluation per job), stop them, and queue the
    replacements the played version places."""
    no_batch_placement = plays_at_least(state.nomad_version, (1, 11, 0))
    index = state._next_index()
    now = state.clock()
    by_job: dict[tuple[str, str], evals.Evaluation] = {}
    for alloc in allocs:
        disable = alloc.job_type == "batch" and no_batch_placement
        alloc.set_desired(alloc.desired_status, alloc.desired_description, index, now, True)
        alloc.disable_placement = True if disable else None
        key = (alloc.namespace, alloc.job_id)
        if key not in by_job:
            by_job[key] = state._new_eval(alloc.job, evals.NODE_DRAIN, index)
    state._emit(index, [a.event("AllocationUpdateDesiredStatus", index) for a in allocs]
                + [evaluation.event(index) for evaluation in by_job.values()])
    state._stop_allocs(allocs, STATUS_MIGRATING, migrate=True)
    for alloc in allocs:
        if alloc.disable_placement or not state._replaceable(alloc):
            logger.info("drain%s stopped %s without a replacement", " deadline" if deadlined else "", alloc.name)
            continue
        state._requeue(alloc, evals.NODE_DRAIN, by_job[(alloc.namespace, alloc.job_id)])
