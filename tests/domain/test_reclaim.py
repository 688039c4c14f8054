"""The reclaim planner (domain/reclaim.py): a lender takes back its quota from its cohort's borrowers."""

from __future__ import annotations

from dataclasses import replace

from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import EntryId, Team
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.preemption import Running, Waiting
from nomad_gpu.domain.reclaim import RECLAIM, plan_reclaims

from .builders import gpu_node, job, ledger_of, occupy, whole

V, N = Team("vision"), Team("nlp")
FAIR = FairShareConfig(teams={V: TeamPolicy(quota_gpu=4, cohort="research"),
                              N: TeamPolicy(quota_gpu=4, borrow_gpu=4, cohort="research")})


def _books(nlp_jobs: int = 8):
    """One 8-GPU node full of nlp's one-GPU jobs (4 within its quota, the rest borrowed), started in order."""
    ledger = ledger_of(gpu_node("n1", 8))
    running = {}
    for k in range(nlp_jobs):
        occupy(ledger, f"nlp-{k}", "n1", 1, team="nlp")
        running[EntryId(f"nlp-{k}")] = Running(EntryId(f"nlp-{k}"), N, "exploratory", 50, float(k), True)
    return ledger, running


def _plan(ledger, running, *jobs, **kw):
    waiting = [Waiting(j, "training", 0.0) for j in jobs]
    return plan_reclaims(waiting, running, ledger, fair=FAIR, fit_policy=get_policy("best-fit"), **kw)


def test_the_lender_takes_back_the_newest_borrowed_work_and_no_more() -> None:
    ledger, running = _books()
    (plan,) = _plan(ledger, running, job("v1", whole(2), team="vision"))
    assert plan.why == RECLAIM and set(plan.victims) == {"nlp-7", "nlp-6"}
    plans = _plan(ledger, running, job("v1", whole(2), team="vision"), job("v2", whole(2), team="vision"))
    assert len(plans) == 1, "one plan per node at a time: the second lender waits for the next round"


def test_a_borrower_is_never_taken_below_its_quota() -> None:
    ledger, running = _books()
    assert _plan(ledger, running, job("v1", whole(5), team="vision")) == (), "vision's quota is 4"
    assert not _plan(ledger, running, job("v1", whole(4), team="vision"), busy_nodes={"n1"})
    (plan,) = _plan(ledger, running, job("v1", whole(4), team="vision"))
    assert set(plan.victims) == {"nlp-4", "nlp-5", "nlp-6", "nlp-7"}


def test_within_its_own_quota_work_is_never_a_victim_and_neither_is_non_preemptible_work() -> None:
    ledger, running = _books(6)  # nlp borrows 2; 2 GPUs are free
    assert _plan(ledger, running, job("v1", whole(2), team="vision")) == (), "it fits: nothing to take"
    occupy(ledger, "vision-own", "n1", 2, team="vision")
    (plan,) = _plan(ledger, running, job("v1", whole(2), team="vision"))
    assert set(plan.victims) == {"nlp-4", "nlp-5"}
    fixed = {e: replace(r, preemptible=False) for e, r in running.items()}
    assert _plan(ledger, fixed, job("v1", whole(2), team="vision")) == (), "borrowed under `any`: waited for"


def test_a_team_past_its_own_quota_or_in_no_cohort_takes_nothing_back() -> None:
    ledger, running = _books()
    occupy_more = job("n-more", whole(1), team="nlp")
    assert _plan(ledger, running, occupy_more) == (), "a borrower is not owed anything"
    assert _plan(ledger, running, job("x1", whole(1), team="solo")) == ()
