"""Node partitions: a client cut off from the servers keeps running its tasks.

`POST /_dev/node/{id}/partition` stops the node's heartbeats; `/heal` ends it. The servers notice only
when the heartbeat TTL and its grace pass (`nodeHeartbeater.resetHeartbeatTimer` and
`invalidateHeartbeat`, nomad/heartbeat.go; `MinHeartbeatTTL` 10 s and `HeartbeatGrace` 10 s,
nomad/config.go, v2.0.5 and v1.10.5; the TTL gets a random stagger on top, and the dev cluster takes the
earliest moment, 20 s on its clock). Then, as the reconciler classifies the node's allocations
(`classificationRules`, scheduler/reconciler/filters.go v2.0.5; `filterByTainted`,
scheduler/reconcile_util.go v1.10.5; the two agree on what is played here):

- the node is `disconnected` when one of its running allocations has `disconnect { lost_after }`
  (`disconnectState`), else `down`;
- on a disconnected node, a running allocation with `lost_after` becomes `unknown` (replaced meanwhile
  unless `replace = false`), and `lost` once `lost_after` passed; anything else is `lost`;
- on a down node, a running allocation with `replace = false` becomes `unknown` and is not replaced;
  anything else is `lost`, desired `stop`, and replaced (after `Allocation.WaitClientStop` with
  `stop_on_client_after`, nomad/structs/alloc.go);
- an allocation already desired `stop` is left as it is (server-terminal allocations are ignored);
- `lost` is client-terminal: the scheduler counts its devices free at once (`EvalContext.ProposedAllocs`,
  scheduler/feasible/context.go); `unknown` is not, and keeps them.

The client meanwhile hears nothing: its tasks run on, exit by themselves unheard, and it stops them
itself after `stop_on_client_after` since its last good heartbeat (`heartbeatStop.watch`,
client/heartbeatstop.go), each stop taking the task's kill_timeout (kills.py). On heal the node is ready
again and the client reports: what ended meanwhile ends in the servers' state too (the client's report
overwrites `lost`: `nestedUpdateAllocFromClient`, nomad/state/state_store.go), an `unknown` allocation
still running is running again, and what the servers stopped (a lost allocation, a job stopped during
the cut) is killed now. The audit tells client truth: `finished_at` is when the task really stopped.

One simplification, stated: an allocation placed on the node but not yet started when the cut begins
starts only after the heal (placements start at once in the dev cluster, so the window is tiny).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import disconnect, evals, kills, nodeops
from .allocs import Alloc, ClientStatus
from .clienttruth import Spell, find, report, task_ended
from .restarts import go_duration

if TYPE_CHECKING:
    from .state import ClusterState

HEARTBEAT_TTL_S = 10.0  # `MinHeartbeatTTL`, nomad/config.go
HEARTBEAT_GRACE_S = 10.0  # `HeartbeatGrace`, nomad/config.go


# ---- the partition and the servers' verdict ----------------------------------------------------------
def partition(state: ClusterState, id_or_name: str) -> dict[str, Any]:
    with state.lock:
        node = state.resolve_node(id_or_name)
        if node.id not in state.partitions.current:
            now = state.clock()
            spell = Spell(node.id, now, len(state.partitions.spells) + 1)
            state.partitions.spells.append(spell)
            state.partitions.current[node.id] = spell
            due = now + (HEARTBEAT_TTL_S + HEARTBEAT_GRACE_S) / state.speed
            state.timers.call_at(due, functools.partial(_ttl_expired, state, node.id, spell.epoch))
            for alloc in list(state.live_by_node.get(node.id, {}).values()):
                stop_s = disconnect.stop_on_client_after_s(alloc.job, alloc.task_group)
                if stop_s is not None and alloc.started_at is not None:
                    state.timers.call_at(now + stop_s / state.speed,
                                         functools.partial(_client_stop, state, alloc.id, spell.epoch))
        return _node_json(state, node.id)


def _ttl_expired(state: ClusterState, node_id: str, epoch: int) -> None:
    with state.lock:
        spell = state.partitions.current.get(node_id)
        if spell is None or spell.epoch != epoch:
            return  # healed in time
        now = state.clock()
        live = [a for a in state.live_by_node.get(node_id, {}).values() if a.desired_status == "run"]
        running = [a for a in live if a.client_status is ClientStatus.RUNNING]
        disconnected = any(disconnect.lost_after_s(a.job, a.task_group) > 0 for a in running)
        if disconnected:
            keep = [a for a in running if disconnect.lost_after_s(a.job, a.task_group) > 0]
        else:
            keep = [a for a in running if not disconnect.replaces(a.job, a.task_group)]
        spell.marked_at, spell.marked = now, "disconnected" if disconnected else "down"
        _set_node_status(state, node_id, spell.marked)
        if keep:
            index = state._next_index()
            for alloc in keep:
                alloc.move(ClientStatus.UNKNOWN, index, now)
                alloc.lost_at = now
            state._emit(index, [alloc.event("AllocationUpdated", index) for alloc in keep])
            for alloc in keep:
                lost_after = disconnect.lost_after_s(alloc.job, alloc.task_group)
                if lost_after > 0:
                    state.timers.call_at(now + lost_after / state.speed,
                                         functools.partial(_lost_after, state, alloc.id))
                    if disconnect.replaces(alloc.job, alloc.task_group) and state._replaceable(alloc):
                        state._requeue(alloc, evals.NODE_UPDATE)
        _mark_lost(state, [a for a in live if a not in keep])
        state._schedule()


def _mark_lost(state: ClusterState, allocs: list[Alloc], *, replace: bool = True) -> None:
    """`lost` and desired `stop`, the devices free; the tasks that ran run on; replacements queued."""
    if not allocs:
        return
    now = state.clock()
    for alloc in allocs:
        alloc.desired_status, alloc.desired_description = "stop", nodeops.STATUS_LOST
        alloc.lost_at = now
    running = [a for a in allocs if a.started_at is not None and a.task_ended_at is None]
    state._finish(allocs, ClientStatus.LOST)
    for alloc in running:
        alloc.task_ended_at = None  # the servers' verdict; the task itself runs on
    for alloc in allocs:
        if not replace or not state._replaceable(alloc):
            continue
        wait_s = disconnect.wait_client_stop_s(alloc.job, alloc.task_group)
        if wait_s > 0:
            state.timers.call_at(now + wait_s / state.speed, functools.partial(_replace_later, state, alloc.id))
        else:
            state._requeue(alloc, evals.NODE_UPDATE)


def _replace_later(state: ClusterState, alloc_id: str) -> None:
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is not None and not alloc.next_allocation and state._replaceable(alloc):
            state._requeue(alloc, evals.NODE_UPDATE)
            state._schedule()


def _lost_after(state: ClusterState, alloc_id: str) -> None:
    """An unknown allocation whose `lost_after` passed is lost (the reconciler's `expiring` set); replaced
    now unless it was replaced when it turned unknown."""
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is None or alloc.client_status is not ClientStatus.UNKNOWN:
            return
        _mark_lost(state, [alloc], replace=not disconnect.replaces(alloc.job, alloc.task_group))
        state._schedule()


def _client_stop(state: ClusterState, alloc_id: str, epoch: int) -> None:
    """`stop_on_client_after` passed without a good heartbeat: the client stops the allocation itself.

    `heartbeatStop.stopAlloc` -> `allocRunner.Destroy` -> `killTasks` (client/heartbeatstop.go,
    client/allocrunner/alloc_runner.go, v2.0.5 and v1.10.5): a `Killing` event with the capped kill_timeout for
    each task still running, the kill signal, and the task forced at the end of its grace unless it exits
    first (kills.py `outcome`; its own end inside the window, clienttruth.py `exits_unheard`). The servers
    hear none of it until the node reconnects."""
    with state.lock:
        alloc = find(state, alloc_id)
        spell = state.partitions.current.get(alloc.node_id) if alloc is not None else None
        if alloc is None or spell is None or spell.epoch != epoch or alloc.task_ended_at is not None:
            return
        alloc.stopped_by_client = True
        ends = kills.outcome(alloc)
        alloc.kill_signals, alloc.kill_exit_signal = ends.signals, ends.exit_signal
        now = state.clock()
        timeout = go_duration(kills.kill_timeout_s(alloc))
        alloc.killing(None, now, f"Sent interrupt. Waiting {timeout} before force killing", timeout)
        state.timers.call_at(now + ends.after_s / state.speed,
                             functools.partial(_client_killed, state, alloc_id, ends.exit_code))


def _client_killed(state: ClusterState, alloc_id: str, exit_code: int | None = None) -> None:
    with state.lock:
        alloc = find(state, alloc_id)
        if alloc is not None:
            task_ended(state, alloc, ClientStatus.COMPLETE, kills.KILLED, exit_code=exit_code)


# ---- the heal -----------------------------------------------------------------------------------------
def heal(state: ClusterState, id_or_name: str) -> dict[str, Any]:
    with state.lock:
        node = state.resolve_node(id_or_name)
        spell = state.partitions.current.pop(node.id, None)
        if spell is None:
            return _node_json(state, node.id)
        now = state.clock()
        spell.healed_at = now
        if node.status != "ready":
            nodeops.set_status(state, node.id, "ready")
        mine = [a for a in state.allocs.values() if a.node_id == node.id]
        gone = [a for a in state.reaped if a.node_id == node.id and a.started_at and a.task_ended_at is None]
        for alloc in mine:
            if alloc.late_report is not None:
                report(state, alloc, alloc.late_report, alloc.late_detail, exit_code=alloc.late_exit_code)
        back = [a for a in mine if a.client_status is ClientStatus.UNKNOWN and a.task_ended_at is None]
        if back:  # reconnecting: the client says it still runs (`categoryReconnecting`)
            index = state._next_index()
            for alloc in back:
                alloc.move(ClientStatus.RUNNING, index, now)
            state._emit(index, [alloc.event("AllocationUpdated", index) for alloc in back])
        stopped = [a for a in mine if a.client_status is ClientStatus.RUNNING and a.desired_status != "run"
                   and not _killing(a)]
        kills.kill(state, stopped)  # stopped while it could not hear it (a kill begun before the cut goes on)
        for alloc in mine:
            if alloc.client_status is ClientStatus.LOST and alloc.started_at is not None \
                    and alloc.task_ended_at is None:  # the servers stopped it: killed now, over its kill_timeout
                state.timers.call_at(now + kills.kill_timeout_s(alloc) / state.speed,
                                     functools.partial(_client_killed, state, alloc.id))
            elif alloc.client_status is ClientStatus.PENDING and alloc.desired_status == "run":
                state.timers.call_soon(functools.partial(state.on_start, alloc.id))
        for alloc in gone:  # collected while cut off: the client stops what the servers no longer know
            state.timers.call_at(now + kills.kill_timeout_s(alloc) / state.speed,
                                 functools.partial(_client_killed, state, alloc.id))
        state._schedule()
        return _node_json(state, node.id)


def busy_node(state: ClusterState, choose: Callable[[list[str]], str], wait_s: float = 10.0) -> str:
    """A node not cut off with a task running on it (waiting up to `wait_s` for one), else any node not cut
    off: where a partition bites (the chaos run's)."""
    deadline = time.monotonic() + wait_s
    while True:
        with state.lock:
            free = sorted(set(state.nodes) - set(state.partitions.current))
            busy = sorted({a.node_id for a in state.live.values() if a.started_at is not None} & set(free))
        if busy or time.monotonic() > deadline:
            return choose(busy or free)
        time.sleep(0.1)


def _killing(alloc: Alloc) -> bool:
    return any(events and events[-1]["Type"] == "Killing" for events in alloc.task_events.values())


def _set_node_status(state: ClusterState, node_id: str, status: str) -> None:
    node = state.nodes[node_id]
    index = state._next_index()
    node.status, node.modify_index, node.status_updated_at = status, index, int(state.clock())
    state._emit(index, [node.event("NodeStreamEvent")])


def _node_json(state: ClusterState, node_id: str) -> dict[str, Any]:
    node = state.nodes[node_id]
    return {"ID": node.id, "Status": node.status, "Partitioned": node.id in state.partitions.current}


def routes(state: ClusterState) -> list[Route]:
    """`POST /_dev/node/{node_id}/partition` and `.../heal`, in the style of the node faults."""
    def fault(action: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            return JSONResponse(await run_in_threadpool(action, state, request.path_params["node_id"]))
        return endpoint

    return [Route("/_dev/node/{node_id}/partition", fault(partition), methods=["POST"]),
            Route("/_dev/node/{node_id}/heal", fault(heal), methods=["POST"])]
