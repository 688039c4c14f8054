"""The dev cluster's scheduler pass: evaluations made, queued placements tried in arrival order, allocations
created with their devices held in the ledger, replacements queued.

`ClusterState`'s methods, bound on its class (`state._schedule()`, `state._new_eval(...)`), so every
writer and every module that settles evaluations reaches them as before; `self` is the state, whose
lock the caller holds. Kept apart from the state's writes (state.py) because this is the one place
that decides where an allocation goes. Nomad's side: `scheduler/generic_sched.go` and
`nomad/blocked_evals.go` (v2.0.5), each rule cited where it is kept.
"""

from __future__ import annotations

import functools
import logging
import uuid
from typing import TYPE_CHECKING

from . import evals, maxrun, systemjobs
from .allocs import Alloc
from .evals import Evaluation
from .inventory import Node
from .jobs import JSON, SYSTEM_TYPES, GroupAsk
from .passviews import PassViews, place_in_pass
from .placement import DeviceChoice
from .ports import AllocatedPort
from .records import JobRecord, Pending

if TYPE_CHECKING:
    from .state import ClusterState

logger = logging.getLogger(__name__)


def new_eval(self: ClusterState, job: JSON, trigger: str, index: int, node_id: str = "") -> Evaluation:
    """A pending evaluation for a job; `_schedule` settles it (complete, or complete + blocked)."""
    evaluation = Evaluation(str(uuid.uuid4()), job["Namespace"], job["ID"], job["Type"], job["Priority"],
                            trigger, job["JobModifyIndex"], index, self.clock(), node_id=node_id)
    self._track(evaluation)
    return evaluation


def track(self: ClusterState, evaluation: Evaluation) -> None:
    self.evals[evaluation.id] = evaluation
    self.evals_by_job.setdefault((evaluation.namespace, evaluation.job_id), []).append(evaluation.id)
    self.open_evals.add(evaluation.id)


def schedule(self: ClusterState) -> None:
    """Try every queued placement in arrival order; emit one PlanResult frame per job; then
    settle the evaluations."""
    try:
        self._place_pending()
    finally:
        evals.settle(self)


def place_pending(self: ClusterState) -> None:
    if not self.pending:
        return
    views = PassViews(self.nodes, self.live_by_node)
    short_offers = self._short_offers
    plans: dict[tuple[str, str], tuple[int, list[Alloc]]] = {}
    waiting: list[Pending] = []
    now = self.clock()
    for item in self.pending:
        record = self.jobs.get((item.namespace, item.job_id))
        if record is None or record.job["Stop"] or item.group not in record.asks:
            continue
        if item.not_before > now:  # a failed evaluation's follow-up, not due yet (evals.py `fail`)
            waiting.append(item)
            continue
        if item.blocked_at is not None and item.blocked_at == self.unblock_token():
            waiting.append(item)  # a max-plan-attempts blocked eval: nothing has unblocked it yet
            continue
        ask = record.asks[item.group]
        victims: list[Alloc] = []
        if item.node_id:  # a system job's, for its node, preempting as Nomad does (systemjobs.py)
            verdict, victims = systemjobs.place_on_node(self, item, ask, record.job["Priority"], views,
                                                        short_offers)
        else:
            verdict = place_in_pass(ask, views, self.nodes, self.ledger.is_free, short_offers=short_offers)
        if verdict.placement is None:
            item.reasons = verdict.reasons
            item.metric = evals.alloc_metric(verdict.evaluated, verdict.in_pool, verdict.available,
                                             verdict.filtered, verdict.exhausted, 0)
            # the audit counts pins someone asked for while held; a replacement Nomad itself made (a
            # migration, a reschedule) waiting for its predecessor's kill_timeout is Nomad's own wait
            if verdict.pinned_held and not item.refusal_counted and not item.previous_alloc:
                item.refusal_counted = True
                self.ledger.count_refusal({"job_id": item.job_id, "task_group": item.group,
                                           "at": self.clock(), "reasons": dict(verdict.reasons)})
                logger.warning("refused to double-book devices for %s/%s: %s",
                               item.job_id, item.group, verdict.reasons)
            waiting.append(item)
            continue
        key = (item.namespace, item.job_id)
        if key not in plans:
            plans[key] = (self._next_index(), [])
        index, placed = plans[key]
        alloc = self._create_alloc(item, record, ask, verdict.placement.node, verdict.placement.devices, index,
                                   verdict.placement.ports)
        placed.append(alloc)
        placed += systemjobs.evict(self, alloc, victims, index) if victims else []
        views.placed(alloc.node_id, ask, len(alloc.device_ids), alloc.ports)
    self.pending = waiting
    # New placements arrive as `PlanResult`; `AllocationCreated` is never emitted (reference section 1).
    for index, placed in sorted(plans.values(), key=lambda plan: plan[0]):
        self._emit(index, [alloc.event("PlanResult", index) for alloc in placed])
        for alloc in placed:
            self.timers.call_soon(functools.partial(self.on_start, alloc.id))


def create_alloc(self: ClusterState, item: Pending, record: JobRecord, ask: GroupAsk, node: Node,
                 devices: tuple[DeviceChoice, ...], index: int, ports: tuple[AllocatedPort, ...] = ()) -> Alloc:
    now = self.clock()
    alloc = Alloc(
        id=str(uuid.uuid4()), eval_id=item.eval_id, namespace=item.namespace, job_id=item.job_id,
        job_type=ask.job_type, job_version=record.job["Version"],
        job_create_index=record.job["CreateIndex"], job=record.job, task_group=item.group,
        name_index=item.name_index, node_id=node.id, node_name=node.name, tasks=ask.tasks,
        devices=devices, duration_s=ask.duration_s, fails=ask.fails, create_index=index,
        registered_at=record.registered_at, created_at=now, previous_allocation=item.previous_alloc,
        restart=ask.restart, restart_window_start=now * self.speed,
        ports=ports, network=ask.network, node_address=node.address,
    )
    self.ledger.hold(alloc.id, alloc.device_ids)
    share_gpu = next((i for i in ask.visible_devices() if i in self.shared_gpu_ids), None)
    # A shared GPU used without a declared share takes all of its time (advisory sharing), and
    # share instances the time of their slots (the project plugin's, held above like any device).
    milli = 1000 if ask.share_milli is None else ask.share_milli
    for choice in devices:
        held = choice.group.share_hold(choice.ids)
        if held is not None:
            share_gpu, milli = held[0], max(ask.share_milli or 0, held[1])
    if share_gpu is not None:
        alloc.share_gpu, alloc.share_milli = share_gpu, ask.share_milli
        if self.ledger.add_share(alloc.id, share_gpu, milli):
            logger.warning("shared GPU %s is oversubscribed (%d milli) by %s", share_gpu,
                           self.ledger.share_sum(share_gpu), alloc.name)
    if item.previous_alloc in self.allocs:
        self.allocs[item.previous_alloc].next_allocation = alloc.id
    self.allocs[alloc.id] = self.live[alloc.id] = alloc
    self.live_by_node.setdefault(alloc.node_id, {})[alloc.id] = alloc
    self.by_job.setdefault((alloc.namespace, alloc.job_id), []).append(alloc)
    maxrun.arm(self, alloc)
    return alloc


def requeue(self: ClusterState, alloc: Alloc, trigger: str, evaluation: Evaluation | None = None) -> None:
    """Queue a replacement for `alloc` under an evaluation (the caller checked `_replaceable`)."""
    if evaluation is None:
        job = self.jobs[(alloc.namespace, alloc.job_id)].job
        evaluation = self._new_eval(job, trigger, self.index, node_id=alloc.node_id)
    self.pending.append(Pending(alloc.namespace, alloc.job_id, alloc.task_group, alloc.name_index,
                                evaluation.id, self.clock(), previous_alloc=alloc.id,
                                node_id=alloc.node_id if alloc.job_type in SYSTEM_TYPES else ""))
