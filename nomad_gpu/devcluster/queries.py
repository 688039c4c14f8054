"""Read-only views of the cluster state: the JSON of the GET endpoints, and the audit.

Kept apart from `state.py` so that the write path (which must stay small enough to trust) is not
buried in presentation. Every function takes the state's lock, so a read never sees half a write.
Shapes and error texts follow reference sections 3, 4 and 6; `filter=` supports the simple
`Selector == "value"` / `!=` / `"value" in Selector` clauses joined by `and` (enough for
`JobID == "x"`), and answers 400 for anything else rather than silently ignoring it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .jobs import JSON, job_stub
from .jobstatus import job_status
from .records import JobRecord, NotFound
from .state import ClusterState
from .writelog import log_of


class BadRequest(ValueError):
    """400 with this text."""


def list_nodes(state: ClusterState, *, prefix: str = "", resources: bool = False, os_attr: bool = False,
               filter_expr: str = "") -> list[JSON]:
    keep = compile_filter(filter_expr)
    with state.lock:
        stubs = [node.stub_json(resources=resources, os_attr=os_attr)
                 for node in state.nodes.values() if node.id.startswith(prefix)]
    return [stub for stub in stubs if keep(stub)]


def get_node(state: ClusterState, node_id: str) -> JSON:
    with state.lock:
        node = state.nodes.get(node_id)
        if node is None:
            raise NotFound("node not found")
        return node.to_json()


def node_allocations(state: ClusterState, node_id: str) -> list[JSON]:
    """`/v1/node/:id/allocations` returns *full* allocations (reference section 3)."""
    with state.lock:
        if node_id not in state.nodes:
            raise NotFound("node not found")
        return [a.to_json(with_job=True) for a in state.allocs.values() if a.node_id == node_id]


def _summary(state: ClusterState, record: JobRecord) -> JSON:
    key = (record.job["Namespace"], record.job["ID"])
    groups = {g["Name"]: {"Queued": 0, "Complete": 0, "Failed": 0, "Running": 0, "Starting": 0, "Lost": 0,
                          "Unknown": 0} for g in record.job["TaskGroups"]}
    column = {"pending": "Starting", "running": "Running", "complete": "Complete", "failed": "Failed",
              "lost": "Lost", "unknown": "Unknown"}
    for alloc in state.job_allocs(key, record.job["CreateIndex"]):
        if alloc.task_group in groups:
            groups[alloc.task_group][column[alloc.client_status.value]] += 1
    for item in state.pending:
        if (item.namespace, item.job_id) == key and item.group in groups:
            groups[item.group]["Queued"] += 1
    return {"JobID": record.job["ID"], "Namespace": record.job["Namespace"], "Summary": groups,
            "Children": {"Pending": 0, "Running": 0, "Dead": 0},
            "CreateIndex": record.job["CreateIndex"], "ModifyIndex": record.job["ModifyIndex"]}


def _record(state: ClusterState, namespace: str, job_id: str) -> JobRecord:
    record = state.jobs.get((namespace, job_id))
    if record is None:
        raise NotFound("job not found")
    return record


def list_jobs(state: ClusterState, *, namespace: str, prefix: str = "", with_meta: bool = False,
              filter_expr: str = "") -> list[JSON]:
    keep = compile_filter(filter_expr)
    with state.lock:
        stubs = []
        for (ns, job_id), record in sorted(state.jobs.items()):
            if namespace in ("*", ns) and job_id.startswith(prefix):
                job = {**record.job, "Status": job_status(state, record)}
                stubs.append(job_stub(job, _summary(state, record), with_meta=with_meta))
    return [stub for stub in stubs if keep(stub)]


def get_job(state: ClusterState, namespace: str, job_id: str) -> JSON:
    with state.lock:
        record = _record(state, namespace, job_id)
        return {**record.job, "Status": job_status(state, record)}


def job_summary(state: ClusterState, namespace: str, job_id: str) -> JSON:
    with state.lock:
        return _summary(state, _record(state, namespace, job_id))


def job_submission(state: ClusterState, namespace: str, job_id: str, version: str | None) -> JSON:
    """`GET /v1/job/:id/submission?version=N` (reference section 6; `JobModifyIndex`, not `JobIndex`)."""
    if version is None or not re.fullmatch(r"\d+", version):
        raise BadRequest("Unable to parse job submission version parameter")
    with state.lock:
        record = state.jobs.get((namespace, job_id))
        submission = None if record is None else record.submissions.get(int(version))
        if record is None or submission is None:
            raise NotFound("job source not found")
        return {
            "Source": submission.get("Source", ""),
            "Format": submission.get("Format", ""),
            "VariableFlags": submission.get("VariableFlags") or {},
            "Variables": submission.get("Variables", ""),
            "Namespace": namespace,
            "JobID": job_id,
            "Version": int(version),
            "JobModifyIndex": record.job["JobModifyIndex"],
        }


def job_allocations(state: ClusterState, namespace: str, job_id: str, *, all_versions: bool = False) -> list[JSON]:
    """Stubs *without* resources: this endpoint calls `Stub(nil)` (reference section 3)."""
    with state.lock:
        record = state.jobs.get((namespace, job_id))
        create_index = None if all_versions or record is None else record.job["CreateIndex"]
        return [alloc.to_stub() for alloc in state.job_allocs((namespace, job_id), create_index)]


def list_allocations(state: ClusterState, *, namespace: str, prefix: str = "", resources: bool = False,
                     task_states: bool = True, filter_expr: str = "") -> list[JSON]:
    keep = compile_filter(filter_expr)
    with state.lock:
        stubs = [alloc.to_stub(resources=resources, task_states=task_states) for alloc in state.allocs.values()
                 if namespace in ("*", alloc.namespace) and alloc.id.startswith(prefix)]
    return [stub for stub in stubs if keep(stub)]


def get_allocation(state: ClusterState, alloc_id: str) -> JSON:
    with state.lock:
        alloc = state.allocs.get(alloc_id)
        if alloc is None:
            raise NotFound("alloc not found")
        return alloc.to_json(with_job=True)


def job_evaluations(state: ClusterState, namespace: str, job_id: str) -> list[JSON]:
    """`GET /v1/job/:id/evaluations`: every evaluation of the job, newest first; an unknown job is an
    empty list, not a 404 (`nomad/job_endpoint.go` Evaluations, v2.0.5)."""
    with state.lock:
        found = [state.evals[i] for i in state.evals_by_job.get((namespace, job_id), [])]
        return [e.to_json() for e in sorted(found, key=lambda e: e.create_index, reverse=True)]


def list_evaluations(state: ClusterState, *, namespace: str, prefix: str = "", filter_expr: str = "") -> list[JSON]:
    keep = compile_filter(filter_expr)
    with state.lock:
        found = [e.to_json() for e in state.evals.values()
                 if namespace in ("*", e.namespace) and e.id.startswith(prefix)]
    return [e for e in found if keep(e)]


def get_evaluation(state: ClusterState, eval_id: str) -> JSON:
    with state.lock:
        evaluation = state.evals.get(eval_id)
        if evaluation is None:
            raise NotFound("eval not found")
        return evaluation.to_json()


def audit(state: ClusterState) -> JSON:
    """`GET /_dev/audit`: every allocation ever made (garbage-collected ones included), register
    times, the refusal counters, garbage collection and fault counters."""
    with state.lock:
        reaped = [{**alloc.audit(), "garbage_collected": True} for alloc in state.reaped]
        return {
            "speed": state.speed,
            "index": state.index,
            "nomad_version": str(state.nomad_version),
            "allocations": reaped + [{**alloc.audit(), "garbage_collected": False}
                                     for alloc in state.allocs.values()],
            "garbage_collection": dict(state.gc_counts),
            "requests_refused": state.faults.refused,
            "faults": state.faults.snapshot(),
            "evaluations": {"blocked": sum(1 for i in state.open_evals if state.evals[i].status == "blocked")},
            "jobs": [{"job_id": job_id, "namespace": ns, "registered_at": list(times)}
                     for (ns, job_id), times in state.register_log.items()],
            "pending": [{"job_id": p.job_id, "namespace": p.namespace, "task_group": p.group,
                         "name_index": p.name_index, "since": p.since, "reasons": dict(p.reasons)}
                        for p in state.pending],
            "double_bookings_refused": state.ledger.double_bookings_refused,
            "share_oversubscriptions": state.ledger.share_oversubscriptions,
            "shared_gpus": state.ledger.share_sums(),
            "refusals": state.ledger.refusals(),
            **state.mig_log.audit(),  # mig_changes, mig_destroyed_in_use (migjobs.py)
            "elections": state.election.snapshot(),
            # every spell a device instance was unhealthy (devicehealth.py): nothing may start on it meanwhile
            "device_health": [dict(spell) for node in state.nodes.values() for spell in node.health_log],
            # every write that reached the cluster, with its caller and a register's nomad_gpu_epoch (writelog.py)
            "writes": log_of(state).snapshot(),
            "partitions": state.partitions.audit(),  # every spell a node was cut off (partitions.py)
        }


_CLAUSE_RE = re.compile(
    r'^\s*(?:(?P<sel>[A-Za-z_][\w.]*)\s*(?P<op>==|!=)\s*(?P<val>"[^"]*"|`[^`]*`)'
    r'|(?P<val2>"[^"]*"|`[^`]*`)\s+(?P<op2>in|not in)\s+(?P<sel2>[A-Za-z_][\w.]*))\s*$'
)


def compile_filter(expr: str) -> Callable[[JSON], bool]:
    """A tiny subset of go-bexpr; anything else is a 400 rather than a silently ignored filter."""
    if not expr.strip():
        return lambda _: True
    tests: list[Callable[[JSON], bool]] = []
    for clause in re.split(r"\s+and\s+", expr.strip()):
        match = _CLAUSE_RE.match(clause)
        if match is None:
            raise BadRequest(f"failed to read filter expression: unsupported clause {clause.strip()!r} "
                             "(the dev cluster supports ==, != and in, joined by and)")
        if match["sel"]:
            tests.append(_equality(match["sel"], match["val"][1:-1], match["op"] == "=="))
        else:
            tests.append(_membership(match["sel2"], match["val2"][1:-1], match["op2"] == "in"))
    return lambda item: all(test(item) for test in tests)


def _select(item: Any, selector: str) -> Any:
    for part in selector.split("."):
        item = item.get(part) if isinstance(item, dict) else None
    return item


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _equality(selector: str, value: str, equal: bool) -> Callable[[JSON], bool]:
    return lambda item: (_as_text(_select(item, selector)) == value) == equal


def _membership(selector: str, value: str, inside: bool) -> Callable[[JSON], bool]:
    def test(item: JSON) -> bool:
        found = _select(item, selector)
        return (value in found if isinstance(found, list | dict | str) else False) == inside

    return test
