"""An attempt Nomad preempted: queued again, no retry used, saying by what.

Nomad's system jobs preempt by default (`DefaultSchedulerConfig.PreemptionConfig.SystemSchedulerEnabled`,
nomad/config.go v2.0.5): an allocation at least 10 priority lower that holds the devices a system job asks
for is evicted (`DesiredStatus: evict`, `PreemptedByAllocation`: `Plan.AppendPreemptedAlloc`,
nomad/structs/structs.go). That is nobody's failure, so it must not use up the entry's retries: the entry
is queued again as a refusal is (`refusals`), and its reason names the preempting allocation and, where the
service follows it, its job. The GPUs are the preemptor's now: once the attempt's allocations are all
gone they are released at once, not drained, and booked for the preemptor (its booking was refused while
ours still held them), so no entry of ours is sent onto them. The transition itself is the life cycle's
(service/life/machine.py, an `AllocUpdate` with `preempted`); this module says why.
"""

from __future__ import annotations

from collections.abc import Mapping

from nomad_gpu.nomad.decode import AllocInfo


def preempted_reason(a: AllocInfo, foreign: Mapping[str, AllocInfo]) -> str:
    by = foreign.get(a.preempted_by)
    return f"preempted by allocation {a.preempted_by}" + (f" of job {by.job_id}" if by is not None else "")
