"""The records the cluster state keeps beside allocations: registered jobs and queued placements.

Kept apart from `state.py` so that the write path reads as behaviour, not as declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .jobs import JSON, GroupAsk

MAX_SUBMISSION_BYTES = 1 << 20  # job_max_source_size default (reference section 6)
KEPT_SUBMISSIONS = 6


class NotFound(LookupError):
    """404 with this text."""


@dataclass
class JobRecord:
    job: JSON
    asks: dict[str, GroupAsk]
    submissions: dict[int, JSON] = field(default_factory=dict)
    registered_at: float = 0.0

    def keep_submission(self, version: int, submission: JSON) -> str:
        """Store the HCL source of a version (the last 6 are kept); an oversized one is dropped
        with a warning, not an error (reference section 6). Returns the warning, or ""."""
        if len(str(submission.get("Source") or "")) > MAX_SUBMISSION_BYTES:
            return "job submission source exceeds job_max_source_size; it was not stored"
        self.submissions[version] = dict(submission)
        for old in sorted(self.submissions)[:-KEPT_SUBMISSIONS]:
            del self.submissions[old]
        return ""


@dataclass
class Pending:
    """A placement Nomad would hold in a blocked eval."""

    namespace: str
    job_id: str
    group: str
    name_index: int
    eval_id: str
    since: float
    previous_alloc: str = ""
    not_before: float = 0.0  # a failed evaluation's follow-up waits until then (evals.py `fail`)
    follow_up_wait_s: float = 0.0  # that follow-up's `Wait`, in Nomad's seconds
    blocked_at: tuple[int, int] | None = None  # a max-plan-attempts blocked eval waits for an unblock after this
    refusal_counted: bool = False
    reasons: dict[str, int] = field(default_factory=dict)
    metric: JSON | None = None  # the AllocMetric of the last failed attempt
    node_id: str = ""  # a system or sysbatch job's placement is for this node only (systemjobs.py)
