"""System and sysbatch jobs: one allocation per eligible node, and the preemption system jobs do.

A companion that books devices must know that another team's system job can take GPUs from under it:

- A system or sysbatch job places one allocation of each group on every ready, eligible node of its
  datacenters and pool that passes its constraints (`SystemScheduler`, scheduler/scheduler_system.go;
  `readyNodesInDCsAndPool`, scheduler/util.go, v2.0.5); a node that comes back or turns eligible gets
  its allocation then. A sysbatch allocation runs to completion and is not placed again on that node; a
  system allocation restarts as a service's does (restart defaults: `TaskGroup.Canonicalize`,
  api/tasks.go). Count is at most 1 (`Job.Validate`, nomad/structs/structs.go).
- Preemption is on for system jobs and off for sysbatch, batch and service jobs by default
  (`DefaultSchedulerConfig.PreemptionConfig`, nomad/config.go). When a system allocation's device ask
  does not fit its node, the scheduler looks for allocations of other jobs whose priority is at least
  10 lower (`filterAndGroupPreemptibleAllocs`), per device group by ascending priority until the
  instances they hold plus the free ones cover the ask, then keeps the option of least net priority,
  taking the allocations holding most instances first (`PreemptForDevice`, `selectBestAllocs`,
  scheduler/feasible/preemption.go), and assigns the devices again without them (rank.go). Only device
  preemption is modelled: a system job short of CPU or memory waits, it does not evict.
- The plan marks each victim `DesiredStatus: evict`, `DesiredDescription: "Preempted by alloc ID <id>"`,
  `PreemptedByAllocation: <id>`, and the new allocation lists them in `PreemptedAllocations`
  (`Plan.AppendPreemptedAlloc`, nomad/structs/structs.go), in one `PlanResult`; an evaluation with
  `TriggeredBy: preemption` follows for each victim's job, whose reconciler places a replacement
  (`UpsertPlanResults`, nomad/state/state_store.go). The client kills a victim (its kill_timeout, kills.py)
  and starts the preempting allocation only after its victims are gone (client/allocwatcher).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import kills
from .allocs import Alloc, ClientStatus
from .jobs import DeviceAsk, GroupAsk
from .passviews import PassViews
from .placement import Verdict, _group_constraints_hold, _out_of_scope, name_matches, node_view, place
from .records import JobRecord, Pending

if TYPE_CHECKING:
    from .inventory import Node
    from .state import ClusterState

PREEMPTS = {"system": True, "sysbatch": False, "batch": False, "service": False}
"""`PreemptionConfig` defaults (nomad/config.go, v2.0.5): SystemSchedulerEnabled only."""
PRIORITY_DELTA = 10  # `jobPriority-alloc.Job.Priority < 10` is skipped (preemption.go)
PREEMPTION = "preemption"  # `EvalTriggerPreemption`, nomad/structs/structs.go


def replan(state: ClusterState, key: tuple[str, str], record: JobRecord, eval_id: str, now: float) -> None:
    """Queue a placement for each group on each node of the job's datacenters and pool that has none
    yet (a live one, or for sysbatch a complete one); stop what the new version no longer wants."""
    state.pending = [p for p in state.pending if (p.namespace, p.job_id) != key]
    kept: dict[tuple[str, str], Alloc] = {}
    for alloc in state.job_allocs(key, record.job["CreateIndex"]):
        if alloc.desired_status == "run" and (alloc.live or alloc.client_status is ClientStatus.COMPLETE):
            kept[(alloc.task_group, alloc.node_id)] = alloc
    wanted = [g["Name"] for g in record.job["TaskGroups"] if g["Count"] > 0]
    surplus = [a for (group, _), a in kept.items() if a.live and group not in wanted]
    if surplus:
        state._stop_allocs(surplus, "alloc not needed due to job update")
    for node in state.nodes.values():
        for group in wanted:
            reason = _out_of_scope(record.asks[group], node)
            # a node outside the job's datacenters or pool never gets one; a down or ineligible one later
            if (group, node.id) in kept or reason in ("missing compatible datacenter", "node pool mismatch"):
                continue
            state.pending.append(Pending(key[0], key[1], group, 0, eval_id, now, node_id=node.id))


def place_on_node(state: ClusterState, item: Pending, ask: GroupAsk, priority: int, views: PassViews,
                  short_offers: bool) -> tuple[Verdict, list[Alloc]]:
    """The placement of a system job's allocation on its node, and the allocations it preempts. With
    victims, their devices are released here: the caller commits the placement at once."""
    node = state.nodes.get(item.node_id)
    if node is None:
        gone = Verdict()
        gone.rule_out("node gone")
        return gone, []
    verdict = place(ask, [views.view(node.id)], state.ledger.is_free, short_offers=short_offers)
    if verdict.placement is not None or not PREEMPTS.get(ask.job_type) or not _short_of_devices(verdict):
        return verdict, []
    here = [a for a in state.live_by_node.get(node.id, {}).values() if a.desired_status == "run"]
    candidates = [a for a in here if (a.namespace, a.job_id) != (item.namespace, item.job_id)]
    victims: list[Alloc] = []
    for task in ask.tasks:
        for request in task.devices:
            chosen = device_victims(request, node, [a for a in candidates if a not in victims], priority,
                                    state.ledger.is_free)
            if chosen is None:
                return verdict, []
            victims += chosen
    freed = {i for v in victims for i in v.device_ids}
    rest = [a for a in here if a not in victims]
    retry = place(ask, [node_view(node, rest)], lambda i: state.ledger.is_free(i) or i in freed,
                  short_offers=short_offers)
    if retry.placement is None or not victims:
        return verdict, []
    for victim in victims:
        state.ledger.release(victim.id)
    return retry, victims


def _short_of_devices(verdict: Verdict) -> bool:
    return (verdict.evaluated == 1 and not verdict.filtered and bool(verdict.exhausted)
            and all(d.startswith("devices") for d in verdict.exhausted))


def device_victims(request: DeviceAsk, node: Node, candidates: list[Alloc], priority: int,
                   is_free: Callable[[str], bool]) -> list[Alloc] | None:
    """`PreemptForDevice` and `selectBestAllocs` for one device ask: [] when a group has room already,
    None when no preemption can make room."""
    options: list[tuple[list[Alloc], dict[str, int]]] = []
    for group in node.groups:
        if not name_matches(request.name, group) or not _group_constraints_hold(request, group):
            continue
        ids = set(group.ids)
        free = sum(1 for i in group.ids if is_free(i) and node.healthy(i))
        if free >= request.count:
            return []
        held = {a.id: sum(1 for i in a.device_ids if i in ids and node.healthy(i)) for a in candidates}
        users = sorted((a for a in candidates if held[a.id] and priority - _priority(a) >= PRIORITY_DELTA),
                       key=_priority)
        count, chosen = 0, []
        for alloc in users:
            count += held[alloc.id]
            chosen.append(alloc)
            if count + free >= request.count:
                options.append((chosen, held))
                break
    best: tuple[int, list[Alloc]] | None = None
    for chosen, held in options:
        taken, kept, priorities = 0, [], set()
        for alloc in sorted(chosen, key=lambda a: -held[a.id]):
            if taken >= request.count:
                break
            taken += held[alloc.id]
            kept.append(alloc)
            priorities.add(_priority(alloc))
        if best is None or sum(priorities) < best[0]:
            best = (sum(priorities), kept)
    return best[1] if best is not None else None


def _priority(alloc: Alloc) -> int:
    return int(alloc.job.get("Priority") or 50)


def evict(state: ClusterState, preemptor: Alloc, victims: list[Alloc], index: int) -> list[Alloc]:
    """Mark the victims evicted by `preemptor` at the plan's index (the caller emits them in its
    `PlanResult`), queue each victim's replacement, and have the client kill them after the frame."""
    now = state.clock()
    preemptor.preempted_allocations = [v.id for v in victims]
    for victim in victims:
        victim.set_desired("evict", f"Preempted by alloc ID {preemptor.id}", index, now, None)
        victim.preempted_by = preemptor.id
    state.timers.call_soon(functools.partial(_after_plan, state, [v.id for v in victims]))
    return victims


def _after_plan(state: ClusterState, alloc_ids: list[str]) -> None:
    """Once the plan's frame is out: each victim's job gets its `preemption` evaluation (a replacement
    where the job still wants one), and the client kills the victims."""
    with state.lock:
        victims = [state.allocs[i] for i in alloc_ids if i in state.allocs]
        for victim in victims:
            if state._replaceable(victim):
                state._requeue(victim, PREEMPTION)
        kills.kill(state, [v for v in victims if v.live])
        state._schedule()
