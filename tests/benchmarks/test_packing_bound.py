"""The offline bound of benchmarks/packing_bound.py: known optima on hand-made clusters, and no
policy of the packing experiment above it on a small sample. Runs only with the `bound` extra."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

pytest.importorskip("highspy")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bound_model import Relaxation, TaskType, exact, maximal_patterns, node_classes, task_counts  # noqa: E402
from packing_bound import level_events, seed_bounds  # noqa: E402

from nomad_gpu.sim.packing import run_seed  # noqa: E402
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, Trace, TraceNode, TracePod, load_trace  # noqa: E402
from nomad_gpu.sim.workload import build_workload  # noqa: E402


def _node(name: str, cpu: int, gpus: int, model: str = "T4", mem: int = 65536) -> TraceNode:
    return TraceNode(name, cpu, mem, gpus, model)


def _pods(n: int, *, cpu: int = 1000, gpus: int = 1, milli: int = 1000, models: frozenset[str] = frozenset(),
          prefix: str = "p") -> list[TracePod]:
    return [TracePod(f"{prefix}{i}", cpu, 1024, gpus, milli, models) for i in range(n)]


CASES = [
    pytest.param([_node("a", 16000, 2)], _pods(3, milli=600), 1200, 1800,
                 id="three 600-milli shares, two GPUs: one per GPU (pooled milli-GPU says 1800)"),
    pytest.param([_node("a", 16000, 1)], _pods(1, milli=600) + _pods(1, milli=400, prefix="q"), 1000, 1000,
                 id="a 600- and a 400-milli share fill one GPU together (a pattern only pricing finds)"),
    pytest.param([_node("a", 10000, 1), _node("b", 10000, 1)], _pods(4, cpu=6000, milli=500), 1000, 5000 / 3,
                 id="two 6-core tasks never share a 10-core node (summed CPU says three)"),
    pytest.param([_node("x", 64000, 4, "A"), _node("y", 64000, 2, "B")],
                 _pods(1, gpus=4, models=frozenset({"B"}), prefix="big")
                 + _pods(3, gpus=2, models=frozenset({"A"}), prefix="two")
                 + _pods(5, milli=300, prefix="share"), 5500, None,
                 id="model constraints: the 4-GPU B task fits nowhere, two of three 2-GPU A tasks fit"),
    pytest.param([_node("a", 96000, 8)], _pods(1, gpus=8) + _pods(2, milli=810, prefix="s")
                 + _pods(2, milli=150, prefix="t"), 8000, None,
                 id="the 8-GPU task takes the node; the shares together would take less"),
]


@pytest.mark.parametrize(("nodes", "pods", "optimum", "pooled"), CASES)
def test_known_optimum(nodes: list[TraceNode], pods: list[TracePod], optimum: int, pooled: float | None) -> None:
    counts = task_counts(pods)
    best = exact(nodes, counts)
    assert best.optimal and best.value == pytest.approx(optimum)
    assert Relaxation(node_classes(nodes), counts).solve(counts) == pytest.approx(optimum)
    if pooled is not None:  # the strengthening is what makes the bound tight here
        weak = Relaxation(node_classes(nodes), counts, patterns=False, cuts=False).solve(counts)
        assert weak == pytest.approx(pooled)


def test_maximal_patterns_fit_and_leave_no_room() -> None:
    pats = maximal_patterns([600, 300, 150])
    assert {tuple(sorted(p.items())) for p in pats} == {
        ((300, 1), (600, 1)), ((150, 2), (600, 1)), ((300, 3),), ((150, 2), (300, 2)), ((150, 4), (300, 1)),
        ((150, 6),),
    }
    for p in pats:
        used = sum(s * a for s, a in p.items())
        assert used <= 1000 and 1000 - used < 150


def test_level_events_are_those_the_curve_averages() -> None:
    # 10 GPUs: each event's arrived % is its arrived milli / 100
    arrived = [4900, 5000, 5040, 5100, 5300, 5600]
    assert level_events(arrived, 10, 50) == range(1, 3)  # 50.0 and 50.4, not 49 or 51
    assert level_events(arrived, 10, 52) == range(3, 5)  # none at 52: the point averages 51-53
    assert level_events(arrived, 10, 56) == range(5, 6)
    assert level_events(arrived, 10, 60) == range(0)


def test_the_level_bound_is_the_diagonal_while_everything_fits() -> None:
    nodes = (_node("a", 96000, 8), _node("b", 96000, 8))
    trace = Trace(nodes, tuple(_pods(40, milli=250)))
    bounds = seed_bounds(trace, 42, (50, 100, 130))
    # every share fits (4 per GPU), so the bound is what arrived, averaged over each level's events
    assert bounds[50] == pytest.approx(50.0, abs=0.8) and bounds[100] == pytest.approx(100.0, abs=0.8)
    assert 130 not in bounds or bounds[130] <= 100.0


def test_no_policy_above_the_bound_on_a_small_sample() -> None:
    full = load_trace(NODES_CSV, PODS_CSV["default"])
    nodes = tuple(sorted(random.Random(7).sample(full.nodes, 4), key=lambda n: n.name))
    trace = Trace(nodes, full.pods)
    tasks = build_workload(trace, 42).tasks
    lp = Relaxation(node_classes(nodes), task_counts(full.pods))
    runs = [run_seed(trace, policy, 42) for policy in ("random", "best-fit", "fgd", "frag-aware")]
    checked = 0
    for i in range(len(tasks) // 2, len(tasks), 3):
        counts = task_counts(tasks[:i + 1])
        bound = lp.solve(counts)
        best = exact(nodes, counts)
        assert best.optimal and best.value <= bound + 1e-6
        for run in runs:
            assert run.used[i] <= best.value + 1e-6, run.policy
        checked += 1
    assert checked >= 3


def test_a_type_the_relaxation_does_not_know_is_refused() -> None:
    nodes = [_node("a", 16000, 2)]
    lp = Relaxation(node_classes(nodes), task_counts(_pods(1)))
    stranger = TaskType(1000, 1024, 0, 250, frozenset())
    with pytest.raises(ValueError):
        lp.solve({stranger: 1})
