"""Preemption's pure planning (nomad_gpu/domain/preemption.py): who may take whose GPUs back, the guards,
the minimal victim set on one node judged by the cycle's own fitter, whole GPUs, MIG and shares alike."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.cycle import CycleConfig, run_cycle
from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.preemption import (
    Preemptible,
    PreemptionPolicy,
    Running,
    Waiting,
    plan_preemptions,
)
from nomad_gpu.domain.requests import JobRequest

from .builders import gpu_node, job, ledger_of, make_node, mig, mig_slices, occupy, plugin_shared_gpus, share, whole

NOW = 10_000.0
POLICY = PreemptionPolicy()
FIT = get_policy("frag-aware")


def running(entry: str, cls: str | None = "exploratory", *, team: str = "a", priority: int = 50,
            started: float = 0.0, preemptible: bool = True, preemptions: int = 0) -> Running:
    return Running(EntryId(entry), Team(team), cls, priority, started, preemptible, preemptions)


def waiting(j: JobRequest, cls: str | None = "serving", since: float = 0.0) -> Waiting:
    return Waiting(j, cls, since)


def full_node(n: int = 4, team: str = "a") -> Ledger:
    ledger = ledger_of(gpu_node("n1", n))
    for k in range(n):
        occupy(ledger, f"x{k}", "n1", 1, team=team)
    return ledger


def plan(ws, runs, ledger, policy=POLICY, now=NOW, **kw):
    return plan_preemptions(ws, {r.entry: r for r in runs}, ledger, policy=policy, fit_policy=FIT, now=now, **kw)


def test_serving_preempts_the_fewest_exploratory_jobs_on_one_node() -> None:
    ledger = full_node()
    runs = [running(f"x{k}", started=float(k)) for k in range(4)]
    (p,) = plan([waiting(job("s", whole(2)))], runs, ledger)
    assert p.node == NodeId("n1") and len(p.victims) == 2 and p.why == "class"
    assert set(p.victims) == {EntryId("x2"), EntryId("x3")}, "the most recently started go first"


@pytest.mark.parametrize(("runs", "pre_cls", "why"), [
    pytest.param([running(f"x{k}", "training") for k in range(4)], "serving", None, id="training-not-by-serving"),
    pytest.param([running(f"x{k}", "serving") for k in range(4)], "serving", None, id="serving-never"),
    pytest.param([running(f"x{k}", team="b") for k in range(4)], "serving", None, id="other-team-never"),
    pytest.param([running(f"x{k}", preemptible=False) for k in range(4)], "serving", None, id="not-preemptible"),
    pytest.param([running(f"x{k}", None, priority=10) for k in range(4)], None, "priority", id="lower-priority"),
    pytest.param([running(f"x{k}", None, priority=50) for k in range(4)], None, None, id="same-priority"),
    pytest.param([running(f"x{k}", "hpo") for k in range(4)], "training", "class", id="training-takes-hpo"),
    pytest.param([running(f"x{k}", "interactive") for k in range(4)], "training", None, id="not-interactive"),
])
def test_who_may_preempt_whom(runs: list[Running], pre_cls: str | None, why: str | None) -> None:
    found = plan([waiting(job("s", whole(1)), pre_cls)], runs, full_node())
    assert (found[0].why if found else None) == why


@pytest.mark.parametrize(("runs", "since"), [
    pytest.param([running(f"x{k}", started=NOW - 299) for k in range(4)], 0.0, id="min_runtime"),
    pytest.param([running(f"x{k}", preemptions=3) for k in range(4)], 0.0, id="max_preemptions"),
    pytest.param([running(f"x{k}") for k in range(4)], NOW - 29, id="preempt_after"),
])
def test_the_guards_protect(runs: list[Running], since: float) -> None:
    assert plan([waiting(job("s", whole(1)), since=since)], runs, full_node()) == ()


def test_the_guards_pass_at_their_bounds_and_zero_allows_at_once() -> None:
    runs = [running(f"x{k}", started=NOW - 300, preemptions=2) for k in range(4)]
    assert plan([waiting(job("s", whole(1)), since=NOW - 30)], runs, full_node())
    fast = PreemptionPolicy(min_runtime_s=0, preempt_after_s=0)
    assert plan([waiting(job("s", whole(1)), since=NOW)], [running(f"x{k}", started=NOW) for k in range(4)],
                full_node(), policy=fast)


def test_disabled_plans_nothing_and_a_victim_is_not_taken_twice() -> None:
    runs = [running(f"x{k}") for k in range(4)]
    assert plan([waiting(job("s", whole(1)))], runs, full_node(), policy=PreemptionPolicy(enabled=False)) == ()
    two = plan([waiting(job("s", whole(2))), waiting(job("t", whole(2)))], runs, full_node())
    assert len(two) == 1, "one preemption per node at a time"
    assert plan([waiting(job("s", whole(1)))], runs, full_node(), busy_nodes=[NodeId("n1")]) == ()
    assert plan([waiting(job("s", whole(1)))], runs, full_node(), busy_entries=[EntryId("s")]) == ()


def test_a_job_that_fits_already_or_never_fits_preempts_nothing() -> None:
    ledger = ledger_of(gpu_node("n1", 4))
    occupy(ledger, "x0", "n1", 1)
    assert plan([waiting(job("s", whole(1)))], [running("x0")], ledger) == ()
    assert plan([waiting(job("s", whole(8)))], [running(f"x{k}") for k in range(4)], full_node()) == ()


def test_a_non_preemptible_tenant_stays_and_the_set_works_around_it() -> None:
    ledger = full_node()
    runs = [running("x0", "training", started=5.0), *(running(f"x{k}") for k in range(1, 4))]
    (p,) = plan([waiting(job("s", whole(3)))], runs, ledger)
    assert EntryId("x0") not in p.victims and len(p.victims) == 3


def test_mig_instances_and_shares_are_judged_by_the_fitter() -> None:
    node = make_node("m1", migs=mig_slices("m1", "3g.40gb", 2))
    ledger = ledger_of(node)
    for k in range(2):
        run_cycle(ledger, [job(f"y{k}", mig("3g.40gb"))], now=0.0, config=CycleConfig())
    assert EntryId("y0") in ledger and EntryId("y1") in ledger
    (p,) = plan([waiting(job("s", mig("3g.40gb")))], [running("y0", started=1.0), running("y1", started=2.0)], ledger)
    assert p.victims == (EntryId("y1"),)
    shared = ledger_of(make_node("s1", gpus=plugin_shared_gpus("s1", 1, 4)))
    for k in range(4):
        run_cycle(shared, [job(f"z{k}", share(250))], now=0.0, config=CycleConfig())
    (q,) = plan([waiting(job("t", share(500)), "training")], [running(f"z{k}", "hpo") for k in range(4)], shared)
    assert len(q.victims) == 2


def test_a_class_that_is_preemptible_only_with_a_checkpoint() -> None:
    assert POLICY.preemptible["training"] is Preemptible.WITH_CHECKPOINT
    assert POLICY.victim_allowed("training", None, checkpoint=True)
    assert not POLICY.victim_allowed("training", None, checkpoint=False)
    assert not POLICY.victim_allowed("serving", True, checkpoint=True)
    assert not POLICY.victim_allowed(None, None, checkpoint=True)
    assert POLICY.victim_allowed(None, True, checkpoint=False)
    assert not POLICY.victim_allowed("exploratory", False, checkpoint=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 2), st.booleans(), st.integers(0, 3)), min_size=1, max_size=6),
       st.integers(1, 6))
def test_chosen_victims_are_allowed_minimal_and_deterministic(tenants, need) -> None:
    ledger = ledger_of(gpu_node("n1", 8))
    runs: list[Running] = []
    for k, (gpus, ok, prio) in enumerate(tenants):
        if sum(len(ledger.get(EntryId(r.entry)).placements[0].instance_ids) for r in runs) + gpus > 8:
            break
        occupy(ledger, f"x{k}", "n1", gpus)
        runs.append(running(f"x{k}", priority=prio, started=float(k), preemptible=ok))
    w = [waiting(job("s", whole(need)))]
    first = plan(w, runs, ledger)
    assert first == plan(w, list(reversed(runs)), ledger)
    for p in first:
        chosen = set(p.victims)
        assert all(r.preemptible for r in runs if r.entry in chosen)
        held = sum(len(ledger.get(r.entry).placements[0].instance_ids) for r in runs if r.entry not in chosen)
        assert 8 - held >= need
        for v in chosen:  # dropping any one victim makes it not fit
            back = len(ledger.get(v).placements[0].instance_ids)
            assert 8 - held - back < need
