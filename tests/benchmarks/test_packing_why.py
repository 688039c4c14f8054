"""benchmarks/packing_why.py on hand-made traces whose answers are known, and the observer it relies on."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from packing_why import demand, failed, landing, shape_of, whole  # noqa: E402

from nomad_gpu.domain.fragmentation import gpu_state  # noqa: E402
from nomad_gpu.domain.ids import MILLI_PER_GPU  # noqa: E402
from nomad_gpu.sim.packing import Decision, place_seed  # noqa: E402
from nomad_gpu.sim.trace import Trace, TraceNode, TracePod  # noqa: E402


def _pod(name: str, gpus: int = 1, milli: int = 1000, cpu: int = 1000, models: frozenset[str] = frozenset(),
         spec: str = "") -> TracePod:
    return TracePod(name, cpu, 1024, gpus, milli, models, spec)


def test_the_observer_sees_every_task_once_before_it_is_committed() -> None:
    trace = Trace((TraceNode("a", 16000, 65536, 2, "T4"),), tuple(_pod(f"p{i}", milli=600) for i in range(4)))
    seen: list[tuple[bool, int]] = []

    def observe(d: Decision) -> None:
        used = sum(MILLI_PER_GPU - free for nf in d.ledger.index.nodes() for _, _, free in gpu_state(nf))
        seen.append((d.placed is not None, used))

    run, _, lost = place_seed(trace, "fgd", 42, observe=observe)
    assert len(seen) == len(run.arrived) == run.placed + run.failed
    assert run.failed == len(lost) == [ok for ok, _ in seen].count(False) > 0
    # before each commit the cluster holds exactly the tasks placed earlier
    assert [used for _, used in seen] == [0, *run.used[:-1]]


def test_failed_counts_the_gpu_of_failed_tasks_by_shape() -> None:
    # a 2-GPU node with CPU for one of the two 1.5-core tasks: the first is placed (50 % arrived,
    # nothing failed), the second fails on CPU (100 %)
    trace = Trace((TraceNode("a", 2000, 65536, 2, "T4"),), tuple(_pod(f"p{i}", cpu=1500) for i in range(2)))
    lost = failed(trace, 42, [50, 100])
    for policy in ("fgd", "frag-aware"):
        assert lost[policy][50] == Counter()
        assert lost[policy][100] == Counter({shape_of(trace.pods[0]): 1000})


def test_whole_counts_nodes_by_whole_free_gpus() -> None:
    trace = Trace((TraceNode("a", 64000, 65536, 4, "T4"), TraceNode("b", 64000, 65536, 4, "T4")),
                  tuple(_pod(f"p{i}") for i in range(4)))
    nodes = whole(trace, 42, [1], 4)
    # at the first task nothing is placed yet: both nodes have all four GPUs free
    assert nodes["fgd"][1] == Counter({4: 2})


def test_landing_splits_outright_from_ties() -> None:
    # two identical one-GPU nodes but for their model: FGD's score cannot tell them apart
    trace = Trace((TraceNode("a", 8000, 65536, 1, "A"), TraceNode("b", 8000, 65536, 1, "B")),
                  (_pod("p0"), _pod("p1")))
    got = landing(trace, 42, 100, {"A"})
    for policy in ("fgd", "frag-aware"):
        assert set(got[policy]) <= {"within a tie", "no other model had room"}
        assert sum(got[policy].values()) in (1000, 2000)  # one or both tasks landed on the A node


def test_demand_groups_the_workload_by_the_models_it_is_bound_to() -> None:
    trace = Trace((TraceNode("a", 8000, 65536, 2, "A"), TraceNode("b", 8000, 65536, 1, "B")),
                  (_pod("p0"), _pod("p1", models=frozenset({"B"}), spec="B")))
    asked, capacity = demand(trace, 42)
    assert capacity == Counter({"A": 2, "B": 1})
    assert set(asked) == {"any model", "B"}
    assert sum(asked.values()) >= 1.3 * 3 * 1000 - 1000  # the workload is tuned to 130 % of the GPUs
