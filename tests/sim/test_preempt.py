"""Preemption in the queue replay: the policy's guards, the chooser on the books, and whole replays on
one or two GPUs where every time can be worked out by hand (grace 60 s, min_runtime 300 s,
preempt_after 30 s: the issue's defaults)."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, Inventory, Node
from nomad_gpu.domain.kinds.share import GpuShare
from nomad_gpu.domain.kinds.whole import WholeGpus
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, NoFit
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.requests import AllocAsk, JobRequest
from nomad_gpu.sim.preempt import (
    WITH_CHECKPOINT,
    Attempt,
    NoVictims,
    PreemptPolicy,
    PreemptStats,
    candidates,
    choose,
)
from nomad_gpu.sim.replay import ReplayConfig, ReplayResult, run_replay
from nomad_gpu.sim.trace import Trace, TraceNode, TracePod

TEAM = Team("t")
POLICY = PreemptPolicy()
FRAG = get_policy("frag-aware")


# ---- the policy -------------------------------------------------------------------------------------
def _attempt(label: str, started_at: float = 0.0, preempted: int = 0) -> Attempt:
    return Attempt(EntryId("v"), label, started_at, (), preempted)


@pytest.mark.parametrize(("preemptor", "victim", "allowed"), [
    pytest.param("serving", "exploratory", True, id="serving-takes-exploratory"),
    pytest.param("serving", "interactive", True, id="serving-takes-interactive"),
    pytest.param("serving", "training", False, id="serving-never-takes-training"),
    pytest.param("training", "hpo", True, id="training-takes-hpo"),
    pytest.param("training", "interactive", False, id="training-never-takes-interactive"),
    pytest.param("training", "serving", False, id="serving-is-never-a-victim"),
    pytest.param("exploratory", "hpo", False, id="exploratory-takes-nothing"),
    pytest.param("serving", "cpu", False, id="no-class-is-not-preemptible"),
])
def test_the_default_policy_says_who_may_take_from_whom(preemptor: str, victim: str, allowed: bool) -> None:
    assert POLICY.may_take(preemptor, _attempt(victim), now=1000.0) is allowed


def test_the_guards_min_runtime_and_max_preemptions() -> None:
    assert not POLICY.may_take("serving", _attempt("exploratory", started_at=800.0), now=1000.0)  # ran 200 s
    assert POLICY.may_take("serving", _attempt("exploratory", started_at=700.0), now=1000.0)  # ran 300 s
    assert POLICY.may_take("serving", _attempt("exploratory", preempted=2), now=1000.0)
    assert not POLICY.may_take("serving", _attempt("exploratory", preempted=3), now=1000.0)


def test_training_is_preemptible_only_with_a_checkpoint() -> None:
    takes_training = {"serving": frozenset({"training"})}
    assert PreemptPolicy(preempts=takes_training).may_take("serving", _attempt("training"), 1000.0)
    assert not PreemptPolicy(preempts=takes_training, checkpoint=False).may_take("serving", _attempt("training"),
                                                                                  1000.0)
    assert POLICY.preemptible["training"] == WITH_CHECKPOINT


@pytest.mark.parametrize(("options", "message"), [
    pytest.param({"preempts": {"hpo": frozenset({"hpo"})}}, "may not preempt itself", id="self"),
    pytest.param({"preemptible": {"hpo": "yes"}}, "preemptible must be", id="not-a-rule"),
    pytest.param({"grace_s": -1.0}, ">= 0", id="negative-grace"),
])
def test_a_policy_that_makes_no_sense_is_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PreemptPolicy(**options)  # type: ignore[arg-type]


# ---- the chooser on the books -----------------------------------------------------------------------
def _node(name: str, whole: int, shared: int = 0) -> Node:
    gpus = [Gpu(InstanceId(f"{name}/g{k}"), "H100", 81920,
                mode=GpuMode.SHARED if k < shared else GpuMode.WHOLE) for k in range(whole + shared)]
    return Node(NodeId(name), name=name, cpu_mhz=64000, memory_mb=262144, gpus=tuple(gpus))


def _job(entry: str, gpu: WholeGpus | GpuShare) -> JobRequest:
    return JobRequest(EntryId(entry), TEAM, (AllocAsk("task", 0, 1000, 1024, gpu),))


def _run(ledger: Ledger, entry: str, label: str, gpu: WholeGpus | GpuShare, started_at: float) -> Attempt:
    """Place and book a job as the cycle would, and return it as a running attempt."""
    got = Fitter(ledger.index, FitContext(FRAG, per_class_limit=None)).fit_job(_job(entry, gpu))
    assert not isinstance(got, NoFit)
    ledger.reserve(EntryId(entry), TEAM, got)
    return Attempt(EntryId(entry), label, started_at, got)


def test_one_victim_is_enough_and_the_most_recently_started_is_chosen() -> None:
    ledger = Ledger(Inventory.of([_node("n1", 2)]))
    running = [_run(ledger, "old", "exploratory", WholeGpus(1), 0.0),
               _run(ledger, "new", "exploratory", WholeGpus(1), 500.0)]
    taken = choose(ledger, _job("serve", WholeGpus(1)), candidates(running, "serving", POLICY, 1000.0),
                   FitContext(FRAG))
    assert taken is not None and taken.victims == (EntryId("new"),) and taken.node == NodeId("n1")
    (placement,) = taken.placements
    assert placement.instance_ids == running[1].placements[0].instance_ids  # the victim's GPU


def test_a_victim_on_a_shared_gpu_is_no_use_to_serving_and_training_is_never_taken() -> None:
    """Serving takes whole GPUs only: freeing a shared GPU's share does not make it fit; the whole GPU
    is held by training, which serving may not preempt."""
    ledger = Ledger(Inventory.of([_node("n1", 1, shared=1)]))
    running = [_run(ledger, "explore", "exploratory", GpuShare(300), 0.0),
               _run(ledger, "train", "training", WholeGpus(1), 0.0)]
    assert running[0].placements[0].is_share and not running[0].isolated
    assert choose(ledger, _job("serve", WholeGpus(1)), candidates(running, "serving", POLICY, 1000.0),
                  FitContext(FRAG)) is None


def test_a_node_held_for_another_head_is_not_taken_from() -> None:
    ledger = Ledger(Inventory.of([_node("n1", 1)]))
    running = [_run(ledger, "explore", "exploratory", WholeGpus(1), 0.0)]
    by_node = candidates(running, "serving", POLICY, 1000.0)
    held = FitContext(FRAG, blocked=frozenset({NodeId("n1")}))
    assert choose(ledger, _job("serve", WholeGpus(1)), by_node, held) is None
    assert choose(ledger, _job("serve", WholeGpus(1)), by_node, FitContext(FRAG)) is not None


def test_a_remembered_failure_is_trusted_while_the_books_and_candidates_are_the_same() -> None:
    """A shape that found no victims on a node is not tried there again until the node's books or its
    candidates change (shown with a remembered failure that the books would not give)."""
    ledger = Ledger(Inventory.of([_node("n1", 1, shared=1)]))
    running = [_run(ledger, "explore", "exploratory", GpuShare(300), 0.0),
               _run(ledger, "train", "training", WholeGpus(1), 0.0)]
    job = _job("serve", WholeGpus(1))
    no_victims: NoVictims = {}
    assert choose(ledger, job, candidates(running, "serving", POLICY, 1000.0), FitContext(FRAG), no_victims) is None
    assert list(no_victims) == [(job.asks, NodeId("n1"))]  # the share on the shared GPU did not help

    ledger = Ledger(Inventory.of([_node("n1", 1)]))
    running = [_run(ledger, "explore", "exploratory", WholeGpus(1), 0.0)]
    by_node = candidates(running, "serving", POLICY, 1000.0)
    nf = ledger.node_free(NodeId("n1"))
    assert nf is not None
    no_victims = {(job.asks, NodeId("n1")): (nf, frozenset({EntryId("explore")}))}
    assert choose(ledger, job, by_node, FitContext(FRAG), no_victims) is None  # trusted
    no_victims = {(job.asks, NodeId("n1")): (NodeFree.of(nf.node, ()), frozenset({EntryId("explore")}))}
    assert choose(ledger, job, by_node, FitContext(FRAG), no_victims) is not None  # the books changed


def test_isolation_violations_are_counted_where_serving_shares_a_gpu() -> None:
    stats = PreemptStats()
    share = AllocPlacement("task", 0, NodeId("n"), 1, 1, (InstanceId("g0"),), share_milli=300)
    stats.placed("exploratory", [share])
    assert stats.violations == 0
    stats.placed("serving", [share])
    assert stats.violations == 1
    stats.released("serving", [share])
    stats.placed("exploratory", [share])
    assert stats.violations == 1


# ---- whole replays ----------------------------------------------------------------------------------
ONE_GPU = (TraceNode("n1", 64000, 262144, 1, "V100"),)


def _pod(name: str, created: float, runs: float, milli: int = 1000) -> TracePod:
    return TracePod(name, 1000, 1024, 1, milli, creation_time=created, scheduled_time=created,
                    deletion_time=created + runs)


def _label(pod: TracePod) -> str:
    return {"e": "exploratory", "s": "serving", "t": "training"}[pod.name[0]]


def _replay(pods: tuple[TracePod, ...], policy: PreemptPolicy | None = POLICY) -> ReplayResult:
    return run_replay(Trace(ONE_GPU, pods), "frag-aware", ReplayConfig(), label_of=_label, preemption=policy)


def test_serving_takes_the_gpu_back_after_preempt_after_and_the_grace() -> None:
    """The exploratory task has run 430 s when serving has waited 30 s: it is stopped, serving starts
    after its 60 s grace (a wait of 90 s, not 600), and it runs again from the start once serving is done
    (back in the queue at 490, started at 590: a wait of 100 s); 490 GPU-s lost."""
    result = _replay((_pod("explore", 0, 1000), _pod("serve", 400, 100)))
    assert result.waits_by == {"exploratory": [100.0], "serving": [90.0]}
    stats = result.preempt
    assert stats is not None
    assert (dict(stats.preemptions), stats.preemptors, stats.max_per_victim) == ({"t0": 1}, 1, 1)
    assert stats.lost_gpu_s == pytest.approx(490.0) and stats.delivered_gpu_s == pytest.approx(1100.0)
    assert stats.victims_unfinished == 0 and stats.violations == 0
    assert stats.serving_waited == stats.serving_isolated_victim == {"t1"}
    assert result.makespan_s == pytest.approx(1590.0)
    plain = _replay((_pod("explore", 0, 1000), _pod("serve", 400, 100)), None)
    assert plain.waits_by == {"exploratory": [0.0], "serving": [600.0]} and plain.preempt is None


def test_a_victim_runs_at_least_min_runtime_before_it_is_taken() -> None:
    """Serving arrives at 100 and may preempt from 130, but the victim is preemptible only at 300."""
    result = _replay((_pod("explore", 0, 1000), _pod("serve", 100, 100)))
    assert result.waits_by["serving"] == [pytest.approx(260.0)]


def test_training_holding_the_gpu_is_never_stopped_for_serving() -> None:
    result = _replay((_pod("train", 0, 1000), _pod("serve", 400, 100)))
    assert result.waits_by == {"training": [0.0], "serving": [600.0]}
    assert result.preempt is not None and not result.preempt.preemptions
    assert result.preempt.serving_waited == {"t1"} and not result.preempt.serving_isolated_victim


def test_a_task_preempted_max_preemptions_times_is_no_longer_taken() -> None:
    """With max_preemptions 1 the second serving task waits for the exploratory task's end."""
    pods = (_pod("explore", 0, 1000), _pod("serve-1", 400, 100), _pod("serve-2", 1000, 100))
    once = _replay(pods, PreemptPolicy(max_preemptions=1))
    assert once.preempt is not None and once.preempt.max_per_victim == 1
    # explore restarts at 590 and ends at 1590; serve-2 waits for it
    assert once.waits_by["serving"] == [90.0, pytest.approx(590.0)]
    twice = _replay(pods)
    assert twice.preempt is not None and twice.preempt.max_per_victim == 2 and twice.preempt.victims_unfinished == 0


def test_without_anything_to_take_the_replay_is_the_one_without_preemption() -> None:
    pods = (_pod("explore", 0, 1000), _pod("serve", 400, 100), _pod("train", 50, 300), _pod("explore-2", 60, 80, 500))
    takes_nothing = _replay(pods, PreemptPolicy(preempts={}))
    plain = _replay(pods, None)
    assert takes_nothing.waits_by == plain.waits_by and takes_nothing.makespan_s == plain.makespan_s
