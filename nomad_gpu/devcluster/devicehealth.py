"""A device instance that turns unhealthy (and healthy again): what a plugin's fingerprint reports.

The stock NVIDIA plugin always reports its GPUs healthy; the project's plugin reports NVML health (an
XID, a GPU fallen off the bus; nomad_gpu/plugin/devices.py). Nomad then:

- carries the health in the node's fingerprint, `NodeResources.Devices[].Instances[].Healthy` and
  `HealthDescription` (`NodeDevice`, nomad/structs/structs.go v2.0.5);
- re-registers the node: a device fingerprint change updates the node (`updateNodeFromDevices` and
  `watchNodeUpdates` in client/client.go), which `Node.Register` writes as a `NodeRegistration` event
  (nomad/state/events.go), and the FSM unblocks blocked evaluations of a ready node's class
  (`applyUpsertNode`, nomad/fsm.go);
- never places onto an unhealthy instance: the scheduler's device allocator and the plan applier's
  accounter skip it ("Skip unhealthy devices as they aren't allocatable": `newDeviceAllocator` in
  scheduler/feasible/device.go, `NewDeviceAccounter` in nomad/structs/devices.go, v2.0.5);
- and leaves allocations already on it alone: nothing in the servers stops them.

The node update is a write: without a leader the servers commit none (election.py), and the client
retries it (`retryRegisterNode`, client/client.go v2.0.5). A change reported during an election is
committed when a leader is elected, in the order reported (the timer thread is held until then); nothing
is unblocked or placed by it meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .inventory import Node
from .records import NotFound

if TYPE_CHECKING:
    from .state import ClusterState

DEFAULT_UNHEALTHY = "GPU fell off the bus (NVML: GPU is lost); needs a reset"
"""The description the project's plugin gives a lost GPU (plugin/devices.py `gpu_health`)."""


def set_health(state: ClusterState, id_or_name: str, instance_id: str, healthy: bool,
               description: str = DEFAULT_UNHEALTHY) -> Node:
    """Mark one fingerprinted instance of a node unhealthy (with a description) or healthy again."""
    with state.lock:
        node = state.resolve_node(id_or_name)
        if not any(instance_id in group.ids for group in node.groups):
            raise NotFound(f"device instance {instance_id} not found on node {node.id}")
        if not state.election.has_leader:  # committed once a leader is elected (the client retries)
            def commit() -> None:
                set_health(state, node.id, instance_id, healthy, description)
            state.timers.call_soon(commit)
            return node
        if healthy == (instance_id not in node.unhealthy):
            return node  # the same fingerprint: the client sends no update
        now = state.clock()
        if healthy:
            del node.unhealthy[instance_id]
            for spell in node.health_log:
                if spell["device_id"] == instance_id and spell["healthy_at"] is None:
                    spell["healthy_at"] = now
        else:
            node.unhealthy[instance_id] = description
            node.health_log.append({"node_id": node.id, "device_id": instance_id, "description": description,
                                    "unhealthy_at": now, "healthy_at": None})
        index = state._next_index()
        node.modify_index = index
        state._emit(index, [node.event("NodeRegistration")])
        state._schedule()  # a ready node's class unblocks its blocked evaluations
        return node


def placed_while_unhealthy(audit: Mapping[str, Any]) -> list[str]:
    """From an audit: the allocations made on a device during one of its unhealthy spells (Nomad makes
    none); what a test or the chaos run judges by."""
    return [a["alloc_id"] for spell in audit.get("device_health", []) for a in audit["allocations"]
            if spell["device_id"] in a["device_ids"] and spell["unhealthy_at"] <= a["created_at"]
            < (spell["healthy_at"] if spell["healthy_at"] is not None else math.inf)]


def routes(state: ClusterState) -> list[Route]:
    """`POST /_dev/node/{node_id}/device/{instance_id}/unhealthy?description=...` and `.../healthy`,
    in the style of the node faults; each answers the instance as the fingerprint now shows it."""
    def fault(healthy: bool) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            node_id, instance_id = request.path_params["node_id"], request.path_params["instance_id"]
            description = request.query_params.get("description") or DEFAULT_UNHEALTHY
            node = await run_in_threadpool(set_health, state, node_id, instance_id, healthy, description)
            return JSONResponse({"NodeID": node.id, "ID": instance_id, "Healthy": node.healthy(instance_id),
                                 "HealthDescription": node.unhealthy.get(instance_id, "")})
        return endpoint

    base = "/_dev/node/{node_id}/device/{instance_id}"
    return [Route(f"{base}/unhealthy", fault(False), methods=["POST"]),
            Route(f"{base}/healthy", fault(True), methods=["POST"])]
