"""An attempt Nomad preempted: queued again, no retry used, saying by what.

Nomad's system jobs preempt by default (`DefaultSchedulerConfig.PreemptionConfig.SystemSchedulerEnabled`,
nomad/config.go v2.0.5): an allocation at least 10 priority lower that holds the devices a system job asks
for is evicted (`DesiredStatus: evict`, `PreemptedByAllocation`: `Plan.AppendPreemptedAlloc`,
nomad/structs/structs.go). That is nobody's failure, so it must not use up the entry's retries: the entry
is queued again as a refusal is (`refusals`), and its reason names the preempting allocation and, where the
service follows it, its job. The GPUs are the preemptor's now: once the attempt's allocations are all
gone they are released at once, not drained, and booked for the preemptor (its booking was refused while
ours still held them), so no entry of ours is sent onto them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from nomad_gpu.nomad.decode import AllocInfo
from nomad_gpu.store import EntryState

if TYPE_CHECKING:
    from nomad_gpu.service.lifecycle import Lifecycle
    from nomad_gpu.service.tracking import Tracked


def preempted_reason(a: AllocInfo, foreign: Mapping[str, AllocInfo]) -> str:
    by = foreign.get(a.preempted_by)
    return f"preempted by allocation {a.preempted_by}" + (f" of job {by.job_id}" if by is not None else "")


def requeue_preempted(life: Lifecycle, t: Tracked, a: AllocInfo) -> None:
    """End the attempt of `t`, whose allocation `a` (terminal) Nomad preempted, and queue it again."""
    gone = all(x.is_terminal for x in t.allocs.values())
    life.end(t, EntryState.QUEUED, preempted_reason(a, life.foreign), refused=True, release_now=gone,
             durable=False)
    life.metrics.finished.labels("preempted").inc()
    by = life.foreign.get(a.preempted_by)
    if by is not None and not by.is_terminal:
        life._foreign_alloc(by)  # its devices were booked for us until now
