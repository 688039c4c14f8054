"""Evaluations: the record of every scheduling decision, and where Nomad says why it refused.

A companion learns that Nomad cannot place its job only from evaluations: the register's evaluation
completes with `FailedTGAllocs` (per task group: how many nodes were evaluated, filtered by which
constraint, exhausted on which dimension) and a follow-up `blocked` evaluation waits for capacity
(`Evaluation.CreateBlockedEval`, `nomad/structs/eval.go` v2.0.5; `scheduler/generic_sched.go`). The
dev cluster keeps the same records so that they reach `GET /v1/job/:id/evaluations` and the
`Evaluation` topic of the event stream (Key = eval ID, FilterKeys = [JobID, DeploymentID],
`nomad/state/events.go` v2.0.5), and so that the garbage collector can tell terminal work apart.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .events import Event

if TYPE_CHECKING:
    from .records import Pending
    from .state import ClusterState

JSON = dict[str, Any]

# Trigger names (`nomad/structs/eval.go`, v2.0.5)
JOB_REGISTER = "job-register"
JOB_DEREGISTER = "job-deregister"
ALLOC_STOP = "alloc-stop"
ALLOC_FAILURE = "alloc-failure"
NODE_UPDATE = "node-update"
NODE_DRAIN = "node-drain"
QUEUED_ALLOCS = "queued-allocs"
FAILED_FOLLOW_UP = "failed-follow-up"
MAX_PLANS = "max-plan-attempts"
FAILED_FOLLOW_UP_WAIT_S = 60.0
"""`EvalFailedFollowupBaselineDelay` (nomad/config.go, v2.0.5), plus a random part of
`EvalFailedFollowupDelayRange` (5 min): `createFailedFollowup`, nomad/leader.go."""
FAILED_FOLLOW_UP_RANGE_S = 300.0
DELIVERY_LIMIT = 3  # EvalDeliveryLimit, nomad/config.go DefaultConfig, v2.0.5
MAX_PLAN_DESC = "created due to placement conflicts"  # DescBlockedEvalMaxPlan, scheduler/structs/const.go
FAIL_MODES = ("plan", "delivery")

PENDING, BLOCKED, COMPLETE, CANCELED, FAILED = "pending", "blocked", "complete", "canceled", "failed"
TERMINAL = frozenset({COMPLETE, CANCELED, "failed"})
_ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass
class Evaluation:
    id: str
    namespace: str
    job_id: str
    job_type: str
    priority: int
    triggered_by: str
    job_modify_index: int
    create_index: int
    create_time: float
    node_id: str = ""
    status: str = PENDING
    status_description: str = ""
    previous_eval: str = ""
    blocked_eval: str = ""
    failed_tg_allocs: dict[str, JSON] | None = None
    queued: dict[str, int] = field(default_factory=dict)
    modify_index: int = 0
    modify_time: float = 0.0
    fails: str = ""  # how it fails (`fail`): "plan" (a blocked eval follows) or "delivery" (a follow-up)
    wait_s: float = 0.0
    next_eval: str = ""

    def __post_init__(self) -> None:
        self.modify_index = self.modify_index or self.create_index
        self.modify_time = self.modify_time or self.create_time

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def set_status(self, status: str, index: int, now: float, description: str = "") -> None:
        self.status, self.status_description = status, description
        self.modify_index, self.modify_time = index, now

    def to_json(self) -> JSON:
        return {
            "ID": self.id,
            "Namespace": self.namespace,
            "Priority": self.priority,
            "Type": self.job_type,
            "TriggeredBy": self.triggered_by,
            "JobID": self.job_id,
            "JobModifyIndex": self.job_modify_index,
            "NodeID": self.node_id,
            "NodeModifyIndex": 0,
            "DeploymentID": "",
            "Status": self.status,
            "StatusDescription": self.status_description,
            "Wait": int(self.wait_s * 1e9),
            "WaitUntil": _ZERO_TIME,
            "NextEval": self.next_eval,
            "PreviousEval": self.previous_eval,
            "BlockedEval": self.blocked_eval,
            "RelatedEvals": None,
            "FailedTGAllocs": self.failed_tg_allocs,
            "ClassEligibility": None,
            "EscapedComputedClass": False,
            "QuotaLimitReached": "",
            "AnnotatePlan": False,
            "QueuedAllocations": dict(self.queued) or None,
            "LeaderACL": "",
            "SnapshotIndex": self.create_index,
            "CreateIndex": self.create_index,
            "ModifyIndex": self.modify_index,
            "CreateTime": int(self.create_time * 1e9),
            "ModifyTime": int(self.modify_time * 1e9),
        }

    def event(self, index: int) -> Event:
        return Event("Evaluation", "EvaluationUpdated", self.id, self.namespace, (self.job_id, ""), index,
                     {"Evaluation": self.to_json()})

    def blocked_follow_up(self, index: int, now: float) -> Evaluation:
        """The `blocked` evaluation that waits to place what this one could not."""
        blocked = Evaluation(str(uuid.uuid4()), self.namespace, self.job_id, self.job_type, self.priority,
                             QUEUED_ALLOCS, self.job_modify_index, index, now, status=BLOCKED,
                             previous_eval=self.id, failed_tg_allocs=self.failed_tg_allocs)
        self.blocked_eval = blocked.id
        return blocked


def alloc_metric(nodes_evaluated: int, nodes_in_pool: int, available: dict[str, int], filtered: dict[str, int],
                 exhausted: dict[str, int], coalesced: int) -> JSON:
    """One `FailedTGAllocs` entry (`AllocMetric`, `nomad/structs/structs.go` v2.0.5): constraint
    filters count under `ConstraintFiltered`, resource shortfalls under `DimensionExhausted`."""
    return {
        "NodesEvaluated": nodes_evaluated,
        "NodesFiltered": sum(filtered.values()),
        "NodesInPool": nodes_in_pool,
        "NodesAvailable": dict(available),
        "ClassFiltered": None,
        "ConstraintFiltered": dict(filtered) or None,
        "NodesExhausted": sum(exhausted.values()),
        "ClassExhausted": None,
        "DimensionExhausted": dict(exhausted) or None,
        "QuotaExhausted": None,
        "ResourcesExhausted": None,
        "Scores": None,
        "ScoreMetaData": None,
        "AllocationTime": 0,
        "CoalescedFailures": coalesced,
    }


def settle(state: ClusterState) -> None:
    """Finish the evaluations this pass decided (`scheduler/generic_sched.go`, v2.0.5): an eval
    whose placements all happened completes; one with placements left completes with
    `FailedTGAllocs` and hands them to a new `blocked` eval, which completes once they are placed."""
    if not state.open_evals:
        return
    waiting: dict[str, list[Pending]] = {}
    for item in state.pending:
        waiting.setdefault(item.eval_id, []).append(item)
    index, now, changed = 0, state.clock(), []
    for eval_id in sorted(state.open_evals, key=lambda i: state.evals[i].create_index):
        evaluation = state.evals[eval_id]
        items = waiting.get(eval_id, [])
        if evaluation.status == BLOCKED and items:
            continue
        if items and not evaluation.fails and all(item.not_before > now for item in items):
            continue  # a follow-up that waits out its delay
        index = index or state._next_index()
        if evaluation.fails:
            changed.extend(_failed(state, evaluation, items, index, now))
            continue
        evaluation.set_status(COMPLETE, index, now)
        state.open_evals.discard(eval_id)
        changed.append(evaluation)
        if items:
            evaluation.failed_tg_allocs = _failed_groups(items)
            evaluation.queued = {item.group: 0 for item in items}
            for item in items:
                evaluation.queued[item.group] += 1
            blocked = evaluation.blocked_follow_up(index, now)
            blocked.queued = dict(evaluation.queued)
            state._track(blocked)
            changed.append(blocked)
            for item in items:
                item.eval_id = blocked.id
    if changed:
        state._emit(index, [evaluation.event(index) for evaluation in changed])


def fail(state: ClusterState, evaluation: Evaluation, mode: str = "plan") -> None:
    """Make `evaluation` fail (fault injection), nothing of it placed, in one of Nomad's two ways (v2.0.5):

    - "plan": the scheduler's plans keep being rejected and `retryMax` gives up after 5 attempts (service)
      or 2 (batch): the eval ends `failed`, "maximum attempts reached (N)", and a `blocked` eval triggered
      by `max-plan-attempts` ("created due to placement conflicts") is linked as its `BlockedEval`
      (`Process` and `createBlockedEval(true)`, scheduler/generic_sched.go; scheduler/util.go `setStatus`).
      Like any blocked eval it waits for capacity to change (an allocation ending, a node update:
      nomad/blocked_evals.go), not for a timer;
    - "delivery": a worker nacks it `EvalDeliveryLimit` (3) times; the leader's `reapFailedEvaluations`
      marks it `failed`, "evaluation reached delivery limit (3)", and links a `failed-follow-up` eval as
      its `NextEval` that waits 1 min + a random 0-5 min (`createFailedFollowup`, nomad/leader.go;
      `Evaluation.CreateFailedFollowUpEval`, nomad/structs/eval.go). Only this path makes a follow-up."""
    if mode not in FAIL_MODES:
        raise ValueError(f"an evaluation fails by {' or '.join(FAIL_MODES)}, not {mode!r}")
    evaluation.fails = mode
    token = state.unblock_token()
    wait_s = FAILED_FOLLOW_UP_WAIT_S + state.rng.uniform(0, FAILED_FOLLOW_UP_RANGE_S)
    for item in state.pending:
        if item.eval_id == evaluation.id:
            if mode == "plan":
                item.blocked_at = token
            else:
                item.not_before = state.clock() + wait_s / state.speed
                item.follow_up_wait_s = wait_s


def _failed(state: ClusterState, evaluation: Evaluation, items: list[Pending], index: int,
            now: float) -> list[Evaluation]:
    state.open_evals.discard(evaluation.id)
    if evaluation.fails == "plan":
        attempts = 2 if evaluation.job_type == "batch" else 5
        evaluation.set_status(FAILED, index, now, f"maximum attempts reached ({attempts})")
        if not items:
            return [evaluation]
        evaluation.queued = {item.group: 0 for item in items}
        for item in items:
            evaluation.queued[item.group] += 1
        blocked = evaluation.blocked_follow_up(index, now)
        blocked.triggered_by, blocked.status_description = MAX_PLANS, MAX_PLAN_DESC
        blocked.queued = dict(evaluation.queued)
        state._track(blocked)
        for item in items:
            item.eval_id = blocked.id
        return [evaluation, blocked]
    evaluation.set_status(FAILED, index, now, f"evaluation reached delivery limit ({DELIVERY_LIMIT})")
    if not items:
        return [evaluation]
    follow = Evaluation(str(uuid.uuid4()), evaluation.namespace, evaluation.job_id, evaluation.job_type,
                        evaluation.priority, FAILED_FOLLOW_UP, evaluation.job_modify_index, index, now,
                        previous_eval=evaluation.id, wait_s=max(item.follow_up_wait_s for item in items))
    evaluation.next_eval = follow.id
    state._track(follow)
    for item in items:
        item.eval_id = follow.id
    state.timers.call_at(min(item.not_before for item in items), functools.partial(_follow_up, state))
    return [evaluation, follow]


def _follow_up(state: ClusterState) -> None:
    with state.lock:
        state._schedule()


def _failed_groups(items: list[Pending]) -> dict[str, JSON]:
    """`FailedTGAllocs`: one metric per task group, the further failures coalesced into it."""
    groups: dict[str, JSON] = {}
    for item in items:
        if item.group in groups:
            groups[item.group]["CoalescedFailures"] += 1
        else:
            groups[item.group] = dict(item.metric or alloc_metric(0, 0, {}, {}, {}, 0))
    return groups
