"""Borrowing and lending within a cohort (domain/cohorts.py) and the cycle's quota check built on it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.cohorts import Held, quota_refusal, reclaim_victims, standings
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import EntryId, Team

V, N, X = Team("vision"), Team("nlp"), Team("solo")
FAIR = FairShareConfig(teams={
    V: TeamPolicy(weight=2, quota_gpu=16, borrow_gpu=8, lend_gpu=12, cohort="research"),
    N: TeamPolicy(weight=1, quota_gpu=16, borrow_gpu=16, cohort="research"),
    X: TeamPolicy(quota_gpu=4),
})


def _may(team: Team, need: float, usage: dict[Team, float], *, preemptible: bool = True,
         requires: str = "preemptible") -> str | None:
    return quota_refusal(team, need, usage, FAIR, preemptible=preemptible, borrow_requires=requires)


def test_within_the_quota_anything_runs() -> None:
    assert _may(N, 16, {}, preemptible=False) is None


def test_past_the_quota_only_preemptible_work_borrows_by_default() -> None:
    usage = {N: 16.0}
    assert _may(N, 4, usage) is None
    refusal = _may(N, 4, usage, preemptible=False)
    assert refusal and "only preemptible work may borrow" in refusal
    assert _may(N, 4, usage, preemptible=False, requires="any") is None


def test_a_lender_lends_at_most_its_lend_limit_and_only_its_unused_quota() -> None:
    assert _may(N, 12, {N: 16.0}) is None
    refusal = _may(N, 13, {N: 16.0})
    assert refusal and "cohort research lends 12 GPU now" in refusal, refusal
    refusal = _may(N, 4, {N: 16.0, V: 14.0})  # vision uses 14 of 16: 2 left to lend
    assert refusal and "lends 2 GPU" in refusal, refusal


def test_a_borrower_stays_within_its_borrow_limit() -> None:
    refusal = _may(V, 9, {V: 16.0})
    assert refusal and "may borrow at most 8 GPU" in refusal


def test_a_team_in_no_cohort_has_a_hard_quota() -> None:
    assert _may(X, 1, {X: 4.0}) == "team solo holds 4 of 4 GPU; needs 1"


def test_standings_split_the_cohorts_borrowing_among_its_lenders() -> None:
    s = standings({N: 24.0, V: 4.0}, FAIR)
    assert (s[N].borrowed, s[N].lent) == (8.0, 0.0)
    assert (s[V].borrowed, s[V].lendable, s[V].lent) == (0.0, 12.0, 8.0)
    assert (s[X].borrowed, s[X].lendable, s[X].lent) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(("policy", "message"), [
    (dict(quota_gpu=4, borrow_gpu=2), "need a cohort"),
    (dict(quota_gpu=4, lend_gpu=5, cohort="c"), "above quota_gpu"),
    (dict(quota_gpu=4, borrow_gpu=-1, cohort="c"), "must be >= 0"),
    (dict(borrow_gpu=2, cohort="c"), "needs a quota_gpu"),
])
def test_policies_that_cannot_mean_anything_are_refused(policy: dict, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        TeamPolicy(**policy)


def _held(entry: str, team: Team, gpus: float, started: float) -> Held:
    return Held(EntryId(entry), team, gpus, started)


def test_reclaim_takes_the_newest_borrowed_work_and_never_below_the_borrowers_quota() -> None:
    usage = {N: 20.0, V: 12.0}  # nlp borrows 4
    held = [_held("n-old", N, 2, 10), _held("n-mid", N, 2, 20), _held("n-new", N, 2, 30), _held("n-big", N, 8, 40)]
    freed = {h.entry: h.gpus for h in held}

    def needs(k: float):
        return lambda victims: sum(freed[v] for v in victims) >= k

    chosen = reclaim_victims(V, held, usage, FAIR, needs(4))
    assert chosen is not None
    assert {h.entry for h in chosen} == {"n-new", "n-mid"}, "n-big would take nlp below its quota"
    assert reclaim_victims(V, held, usage, FAIR, needs(6)) is None, "only the 4 borrowed GPU may be taken"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([N, X]), st.integers(1, 4), st.integers(0, 100)), max_size=8),
       st.integers(0, 10), st.integers(0, 24))
def test_reclaim_is_minimal_and_keeps_every_borrower_at_its_quota(jobs, need: int, nlp_extra: int) -> None:
    held = [_held(f"e{i}", t, g, s) for i, (t, g, s) in enumerate(jobs)]
    usage = {N: 16.0 + nlp_extra, V: 0.0, X: 4.0}
    freed = {h.entry: h.gpus for h in held}

    def fits(victims: frozenset[EntryId]) -> bool:
        return sum(freed[v] for v in victims) >= need

    chosen = reclaim_victims(V, held, usage, FAIR, fits)
    if chosen is None:
        return
    ids = frozenset(h.entry for h in chosen)
    assert fits(ids)
    assert all(h.team == N for h in chosen), "only the cohort's borrowers lose work"
    assert sum(h.gpus for h in chosen) <= nlp_extra, "a borrower is never taken below its quota"
    for h in chosen:
        assert not fits(ids - {h.entry})


def test_the_cycle_admits_preemptible_work_on_a_cohorts_lent_quota_and_nothing_else() -> None:
    from dataclasses import replace

    from nomad_gpu.domain.cycle import CycleConfig, Wait

    from .builders import cycle, gpu_node, job, ledger_of, occupy, whole

    ledger = ledger_of(gpu_node("n1", 8), gpu_node("n2", 8))
    occupy(ledger, "nlp-own", "n1", 4, team="nlp")
    cfg = CycleConfig(fair=FairShareConfig(teams={
        V: TeamPolicy(quota_gpu=4, cohort="research"), N: TeamPolicy(quota_gpu=4, borrow_gpu=4, cohort="research")}))
    borrow = replace(job("borrow", whole(2), team="nlp"), preemptible=True)
    keep = job("keep", whole(2), team="nlp", at=1.0)
    result = cycle(ledger, [borrow, keep], cfg=cfg)
    assert [d.entry for d in result.admitted] == ["borrow"]
    (wait,) = [d for d in result.decisions if isinstance(d, Wait)]
    assert "only preemptible work may borrow" in wait.detail
    occupy(ledger, "vision-own", "n2", 3, team="vision")  # vision now lends 1
    more = replace(job("more", whole(2), team="nlp", at=2.0), preemptible=True)
    (last,) = cycle(ledger, [more], cfg=cfg).decisions
    assert isinstance(last, Wait) and "cohort research lends" in last.detail, last


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([V, N, X, Team("other")]), st.floats(0, 40), st.floats(0, 30), st.floats(0, 30),
       st.floats(0, 6), st.booleans(), st.sampled_from(["preemptible", "any"]))
def test_room_is_exactly_the_largest_need_the_quota_accepts(team: Team, need: float, v: float, n: float, x: float,
                                                             preemptible: bool, requires: str) -> None:
    from nomad_gpu.domain.cohorts import room

    usage = {V: v, N: n, X: x}
    limit = room(team, usage, FAIR, preemptible=preemptible, borrow_requires=requires)
    refused = quota_refusal(team, need, usage, FAIR, preemptible=preemptible, borrow_requires=requires)
    assert (refused is None) == (need <= limit + 1e-9), (limit, refused)
