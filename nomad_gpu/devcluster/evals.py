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
FAILED_FOLLOW_UP_WAIT_S = 60.0
"""`EvalFailedFollowupBaselineDelay` (nomad/config.go, v2.0.5); the random extra of up to 5 min is left out."""

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
    fails: bool = False  # the scheduler gives up on it (`fail`): it ends `failed`, with a follow-up
    wait_s: float = 0.0

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
            "NextEval": "",
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


def fail(state: ClusterState, evaluation: Evaluation) -> None:
    """Make the scheduler give up on `evaluation` (fault injection): `retryMax` ends it with
    "maximum attempts reached (N)", 5 attempts for service jobs and 2 for batch (`SetStatusError`,
    scheduler/util.go and generic_sched.go, v2.0.5), and nothing of its plan is applied. The leader then
    creates a `failed-follow-up` evaluation that waits `EvalFailedFollowupBaselineDelay` before it runs
    (`Evaluation.CreateFailedFollowUpEval`, nomad/structs/eval.go; `reapFailedEvaluations`, nomad/leader.go)."""
    evaluation.fails = True
    until = state.clock() + FAILED_FOLLOW_UP_WAIT_S / state.speed
    for item in state.pending:
        if item.eval_id == evaluation.id:
            item.not_before = until


def _failed(state: ClusterState, evaluation: Evaluation, items: list[Pending], index: int,
            now: float) -> list[Evaluation]:
    attempts = 2 if evaluation.job_type == "batch" else 5
    evaluation.set_status(FAILED, index, now, f"maximum attempts reached ({attempts})")
    state.open_evals.discard(evaluation.id)
    if not items:
        return [evaluation]
    follow = Evaluation(str(uuid.uuid4()), evaluation.namespace, evaluation.job_id, evaluation.job_type,
                        evaluation.priority, FAILED_FOLLOW_UP, evaluation.job_modify_index, index, now,
                        previous_eval=evaluation.id, wait_s=FAILED_FOLLOW_UP_WAIT_S)
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
