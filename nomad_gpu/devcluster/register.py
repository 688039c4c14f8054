"""The register request around a job: `EnforceIndex`, `JobModifyIndex`, the namespace it lands in,
and whether it changes anything.

These are the rules a companion leans on to register exactly once (issue: lost replies), so they sit
together, each with the Nomad source it was read from.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from .jobs import JSON, JobRequestError


class RegisterConflict(ValueError):
    """A register refused by `EnforceIndex`: an RPC error with no HTTP code, so Nomad answers 500 with
    the bare text (`command/agent/http.go` errCodeFromHandler, v2.0.5)."""


ENFORCE_INDEX_PREFIX = "Enforcing job modify index"  # `nomad/structs/job.go`, v2.0.5 (same text in v1.10.5)


@dataclass(frozen=True)
class RegisterOptions:
    """The `JobRegisterRequest` fields beside `Job` that the dev cluster honours."""

    enforce_index: bool = False
    job_modify_index: int = 0
    namespace: str = ""  # the body's WriteRequest Namespace (`command/agent/job_endpoint.go`)


def register_options(body: JSON) -> RegisterOptions:
    """`EnforceIndex`, `JobModifyIndex` and `Namespace` of a register body (already checked to be an
    object). A value of the wrong JSON type fails decoding, as Go's decoder does: 400."""
    enforce = body.get("EnforceIndex", False)
    index = body.get("JobModifyIndex", 0)
    namespace = body.get("Namespace", "")
    if enforce is None:
        enforce = False
    if index is None:
        index = 0
    if not isinstance(enforce, bool):
        raise JobRequestError("Request decode failed: EnforceIndex must be a bool")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise JobRequestError("Request decode failed: JobModifyIndex must be an unsigned integer")
    if not isinstance(namespace, str | None):
        raise JobRequestError("Request decode failed: Namespace must be a string")
    return RegisterOptions(enforce, index, namespace or "")


def enforce_index(existing: JSON | None, index: int) -> None:
    """Nomad's `Job.EnforceIndex` (`nomad/structs/job.go`, v2.0.5; `nomad/job_endpoint.go` v1.10.5):
    index 0 means the job must not exist; any other index must equal the job's JobModifyIndex. A
    stopped job still exists; only a purge or the garbage collector removes it."""
    if existing is not None:
        if index == 0:
            raise RegisterConflict(f"{ENFORCE_INDEX_PREFIX} 0: job already exists")
        if index != existing["JobModifyIndex"]:
            raise RegisterConflict(f"{ENFORCE_INDEX_PREFIX} {index}: job exists with conflicting job modify "
                                   f"index: {existing['JobModifyIndex']}")
    elif index != 0:
        raise RegisterConflict(f"{ENFORCE_INDEX_PREFIX} {index}: job does not exist")


# Fields the server sets, ignored when comparing specs (`Job.SpecChanged`, `nomad/structs/structs.go` v2.0.5).
_SERVER_FIELDS = ("Status", "StatusDescription", "Stable", "Version", "CreateIndex", "ModifyIndex",
                  "JobModifyIndex", "SubmitTime")


def spec_changed(old: JSON | None, new: JSON) -> bool:
    """Whether a register changes the stored job. An unchanged spec makes no new version: Nomad only
    creates an evaluation (`nomad/job_endpoint.go` Register, v2.0.5)."""
    if old is None:
        return True
    candidate = {**new, **{key: old.get(key) for key in _SERVER_FIELDS}}
    candidate.setdefault("ParentID", "")
    candidate.setdefault("Dispatched", False)
    candidate["ParentID"] = candidate["ParentID"] or ""
    return candidate != old


def check_register_body(body: Any) -> tuple[JSON, JSON | None]:
    """The `Job` and optional `Submission` of a register body, or the 400 errors Nomad gives."""
    if not isinstance(body, dict) or not isinstance(body.get("Job"), dict):
        raise JobRequestError("Job must be specified")
    job = body["Job"]
    if not job.get("ID"):
        raise JobRequestError("Job ID hasn't been provided")
    submission = body.get("Submission")
    if submission is not None and not isinstance(submission, dict):
        raise JobRequestError("Submission must be an object")
    return job, submission


def register_namespace(query_namespace: str | None, options: RegisterOptions, job: JSON) -> str:
    """Where a register lands (`namespaceForJob`, `command/agent/job_endpoint.go` v2.0.5): the
    `?namespace=` query parameter wins, then the body's `Namespace`, then the job's own, then `default`."""
    job_namespace = job.get("Namespace")
    return (query_namespace or options.namespace or (job_namespace if isinstance(job_namespace, str) else "")
            or "default")


def admission_errors(job: JSON, namespaces: Collection[str], node_pools: Collection[str]) -> list[str]:
    """The admission validators that run before `jobValidate` (`nomad/job_endpoint_hooks.go`,
    v2.0.5): the namespace must exist (`nomad/job_endpoint_validators.go`) and so must the node pool
    (`nomad/job_endpoint_hook_node_pool.go`); their errors join the validation errors (500)."""
    errors = []
    if job["Namespace"] not in namespaces:
        errors.append(f'job "{job["ID"]}" is in nonexistent namespace "{job["Namespace"]}"')
    if job["NodePool"] not in node_pools:
        errors.append(f'job "{job["ID"]}" is in nonexistent node pool "{job["NodePool"]}"')
    return errors
