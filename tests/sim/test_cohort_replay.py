"""The cohort replay (nomad_gpu/sim/cohortreplay.py) on a trace small enough to follow by hand."""

from __future__ import annotations

from nomad_gpu.sim.cohortreplay import CohortConfig, run_cohorts
from nomad_gpu.sim.trace import Trace, TraceNode, TracePod

GRACE = 60.0


def _pod(name: str, at: float, runtime: float) -> TracePod:
    return TracePod(name, 1000, 1024, 1, 1000, creation_time=at, scheduled_time=at, deletion_time=at + runtime)


def _trace() -> Trace:
    """Team 0 is busy first: four 1-GPU tasks of 10,000 s on a 4-GPU node (its quota is 2: it borrows
    2). Team 1 arrives at 1,000 s with two tasks of 100 s, within its own quota of 2."""
    pods = [_pod(f"a{k}", float(k), 10_000.0) for k in range(4)] + [_pod(f"b{k}", 1000.0 + k, 100.0)
                                                                   for k in range(2)]
    return Trace((TraceNode("n1", 64_000, 512_000, 4, "A100"),), tuple(pods))


CONFIG = CohortConfig(teams=2, busy_share=1.0, windows=2, speedup=1.0, node_fraction=1.0, grace_s=GRACE)


def test_a_lender_gets_its_quota_back_within_the_grace_and_the_borrower_loses_only_what_it_borrowed() -> None:
    got = run_cohorts(_trace(), "cohort", CONFIG).to_json()["teams"]
    lender, borrower = got["team1"], got["team0"]
    # one reclaim per node at a time, as the service does: the second task's starts after the first's grace
    assert lender["reclaims"] == 2 and lender["reclaim_p50"] <= 2 * GRACE and lender["reclaim_p95"] <= 2 * GRACE
    assert borrower["preempted"] == 2, "the two tasks past its quota, never the two within it"
    assert borrower["never_started"] == 0 and lender["never_started"] == 0, "every victim runs again"
    # the victims were the newest (started at 3 s, then 2 s), stopped at 1,060 s and 1,120 s
    assert abs(borrower["lost_gpu_hours"] - ((1060 - 3) + (1120 - 2)) / 3600) < 0.01, borrower


def test_hard_quotas_leave_half_the_node_idle_and_no_quotas_make_the_lender_wait() -> None:
    hard = run_cohorts(_trace(), "hard", CONFIG).to_json()
    assert hard["teams"]["team1"]["wait_p95"] == 0.0 and hard["teams"]["team0"]["preempted"] == 0
    assert hard["teams"]["team0"]["wait_p95"] > 9_000, "team 0's third and fourth tasks wait for its own"
    none = run_cohorts(_trace(), "none", CONFIG).to_json()
    assert none["teams"]["team1"]["wait_p50"] > 8_000, "without quotas the late team waits for the busy one"
    cohort = run_cohorts(_trace(), "cohort", CONFIG).to_json()
    assert cohort["alloc_pct"] > hard["alloc_pct"]
