"""benchmarks/classes.py on a hand-made trace: the fleets it builds, the asks per scenario, and what it
counts (isolation violations of time-shared serving tasks; none under classes)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from classes import fleet, run_one  # noqa: E402

from nomad_gpu.domain.inventory import GpuMode  # noqa: E402
from nomad_gpu.sim.trace import Trace, TraceNode, TracePod  # noqa: E402

NODES = (TraceNode("n1", 64000, 262144, 8, "V100"), TraceNode("n2", 64000, 262144, 2, "V100"),
         TraceNode("n3", 64000, 262144, 2, "V100"))
PODS = (TracePod("serve-1", 1000, 1024, 1, 200), TracePod("serve-2", 1000, 1024, 1, 300),
        TracePod("explore-1", 1000, 1024, 1, 250), TracePod("train-1", 1000, 1024, 2, 1000),
        TracePod("cpu-1", 1000, 1024, 0, 0))
QOS = {"serve-1": "LS", "serve-2": "LS", "explore-1": "BE", "train-1": "LS", "cpu-1": "BE"}
TRACE = Trace(NODES, PODS)


def test_the_split_fleet_rounds_with_a_carry_over_the_nodes() -> None:
    inv = fleet(TRACE, "classes", (1, 1, 2))  # 12 GPUs: 3 MIG-mode, 3 shared, 6 whole
    parents = {m.pci_bus_id for n in inv for m in n.migs}
    shared = [g for n in inv for g in n.gpus if g.mode is GpuMode.SHARED]
    whole = [g for n in inv for g in n.gpus if g.mode is GpuMode.WHOLE]
    assert (len(parents), len(shared), len(whole)) == (3, 3, 6)
    assert {m.profile.name for n in inv for m in n.migs} == {"3g.40gb", "2g.20gb", "1g.10gb"}
    assert all(g.model == "NVIDIA H100 80GB HBM3" and g.memory_mib == 81920 for n in inv for g in n.gpus)


def test_time_shared_serving_counts_violations_and_classes_none() -> None:
    """The workload is the paper's (the originals, then copies up to 130 % of the GPUs), the same in each."""
    share = run_one((TRACE, QOS, "share", (0, 0, 1), 42))
    classes = run_one((TRACE, QOS, "classes", (1, 1, 2), 42))
    whole = run_one((TRACE, QOS, "whole", (0, 0, 1), 42))
    assert share.arrived_gpu == classes.arrived_gpu == whole.arrived_gpu
    assert share.violations > 0 and classes.violations == whole.violations == 0
    assert classes.by_kind["mig"] > 0 and classes.by_kind["share"] > 0  # serving on MIG, exploratory shares
    assert whole.by_kind["share"] == whole.by_kind["mig"] == 0
    # a fractional task given a whole GPU holds all of it: more held than placed
    assert whole.held_pct > whole.allocation_pct and share.held_pct == share.allocation_pct


def test_a_written_run_reads_back_the_same() -> None:
    import json

    from classes import _run_of, run_json  # noqa: PLC0415

    run = run_one((TRACE, QOS, "classes", (1, 1, 2), 43))
    assert _run_of(json.loads(json.dumps(run_json(run)))) == run


def test_the_replay_reports_each_class_s_waits_and_the_never_started_apart() -> None:
    """One whole GPU, real time: the second training task waits for the first to end (t=100), the
    serving task (a whole GPU under `whole`) for the second (t=150); two GPUs never come free."""
    from classes import replay_one  # noqa: PLC0415

    node = (TraceNode("n1", 64000, 262144, 1, "V100"),)
    pods = (TracePod("train-1", 1000, 1024, 1, 1000, creation_time=0, scheduled_time=0, deletion_time=100),
            TracePod("train-2", 1000, 1024, 1, 1000, creation_time=10, scheduled_time=10, deletion_time=60),
            TracePod("serve-1", 1000, 1024, 1, 200, creation_time=20, scheduled_time=20, deletion_time=30),
            TracePod("train-big", 1000, 1024, 2, 1000, creation_time=5, scheduled_time=5, deletion_time=9),
            TracePod("never-ran", 1000, 1024, 1, 500, creation_time=1))
    qos = {"serve-1": "LS", "never-ran": "BE"}
    run = replay_one((Trace(node, pods), qos, "whole", (0, 0, 1), 42, 1.0, 1.0))
    assert run.waits == {"training": [0.0, 90.0], "serving": [130.0]}
    assert run.never == {"training": 1} and run.left_out == 1
    assert run.pct("training", 50) == 45.0 and run.pct("exploratory", 50) is None


def test_a_split_per_node_gives_each_node_one_mode_and_keeps_the_big_node_whole() -> None:
    from classfleet import SplitSpec

    spec = SplitSpec.parse("1:1:2/node")
    assert spec == SplitSpec((1, 1, 2), by_node=True) and spec.label == "1:1:2 per node"
    inv = fleet(TRACE, "classes", spec.parts, spec.by_node)
    modes = {n.name: ("mig" if n.migs else {g.mode for g in n.gpus}.pop().value) for n in inv}
    assert modes == {"n1": "whole", "n2": "mig", "n3": "shared"}  # 8 of 12 whole, on the 8-GPU node
    for bad in ("1:1", "1:1:2/gpu", "1:1:2+later", "0:0:0", "a:b:c"):
        try:
            SplitSpec.parse(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_relayouts_turn_idle_small_instances_into_the_3g_a_serving_task_waits_for() -> None:
    """One MIG GPU (3g@4 + 2g@0 + 1g@2 + 1g@3), two serving tasks of 37 GiB and no whole GPU: the second
    fits only once the planner re-lays the idle 2g and 1g into a 3g@0; without re-layouts it fails."""
    from classfleet import SplitSpec

    node = (TraceNode("m1", 64000, 262144, 1, "V100"),)
    pods = (TracePod("serve-1", 1000, 1024, 1, 460), TracePod("serve-2", 1000, 1024, 1, 460))
    qos = {"serve-1": "LS", "serve-2": "LS"}
    static = run_one((Trace(node, pods), qos, "classes", SplitSpec((1, 0, 0)), 42))
    relaid = run_one((Trace(node, pods), qos, "classes", SplitSpec((1, 0, 0), relayout=True), 42))
    assert static.relayouts == 0 and static.failed["serving"] > 0
    assert relaid.relayouts == 1 and relaid.failed["serving"] == static.failed["serving"] - 1
    assert relaid.by_kind["mig"] == static.by_kind["mig"] + 1 and relaid.violations == 0


def test_one_gpu_training_may_take_an_idle_shared_gpu_whole_when_the_policy_says_so() -> None:
    """Two shared GPUs and no whole one (the workload: a one-GPU training task, then three copies of a
    0.3-GPU exploratory one): under the default policy the training task fails; with training tiers
    [[gpu], [share]] it takes a shared GPU whole (1000 milli) and the exploratory tasks share the other."""
    from classfleet import SplitSpec

    node = (TraceNode("s1", 64000, 262144, 2, "V100"),)
    pods = (TracePod("train-1", 1000, 1024, 1, 1000), TracePod("explore-1", 1000, 1024, 1, 300))
    qos = {"explore-1": "BE"}
    plain = run_one((Trace(node, pods), qos, "classes", SplitSpec((0, 1, 0)), 42))
    shared = run_one((Trace(node, pods), qos, "classes", SplitSpec.parse("0:1:0+training-shared"), 42))
    assert (plain.placed, plain.failed) == ({"exploratory": 3}, {"training": 1})
    assert (shared.placed, shared.failed) == ({"training": 1, "exploratory": 3}, {})
    assert round(shared.allocated_eq, 6) == 1.0 + 0.9  # the training task holds all of its GPU
    assert SplitSpec.parse("1:1:6/node+relayout+training-shared").label == (
        "1:1:6 per node + re-layouts + training on idle shared GPUs")


def test_written_replays_read_back_and_report_together(tmp_path: Path, capsys: Any) -> None:
    import json

    from classes import _replay_of, replay_one, report_replay  # noqa: PLC0415

    node = (TraceNode("n1", 64000, 262144, 1, "V100"),)
    pods = (TracePod("train-1", 1000, 1024, 1, 1000, creation_time=0, scheduled_time=0, deletion_time=100),
            TracePod("serve-1", 1000, 1024, 1, 200, creation_time=20, scheduled_time=20, deletion_time=30))
    run = replay_one((Trace(node, pods), {"serve-1": "LS"}, "whole", (0, 0, 1), 42, 1.0, 1.0))
    back = _replay_of(json.loads(json.dumps({**run.__dict__, "never": dict(run.never)})))
    assert back == run
    report_replay("default", [42], 1.0, 1.0, [back])
    assert "| whole | 80.0 / 80.0 | - / - | 0.0 / 0.0 |" in capsys.readouterr().out


def test_a_class_the_fleet_cannot_serve_fails_and_never_runs_as_a_cpu_task() -> None:
    """Only shared GPUs: serving has no isolated option anywhere, so the service would refuse it at
    submission; the experiment counts it failed, never placed as CPU-only work."""
    node = (TraceNode("s1", 64000, 262144, 2, "V100"),)
    pods = (TracePod("serve-1", 1000, 1024, 1, 300),)
    run = run_one((Trace(node, pods), {"serve-1": "LS"}, "classes", (0, 1, 0), 42))
    assert run.placed["serving"] == 0 and run.failed["serving"] > 0 and run.placed_gpu == 0


def test_a_preempt_row_takes_gpus_back_for_serving_and_reports_what_it_cost(capsys: Any) -> None:
    """One whole GPU in real time: an exploratory task (a 0.3-GPU BE task given the whole GPU) runs from
    0; a serving task arrives at 400 and, with `+preempt`, starts at 490 (30 s, then the 60 s grace)."""
    import json

    from classes import _replay_of, replay_one, report_replay  # noqa: PLC0415
    from classfleet import SplitSpec  # noqa: PLC0415

    node = (TraceNode("n1", 64000, 262144, 1, "V100"),)
    pods = (TracePod("explore-1", 1000, 1024, 1, 300, creation_time=0, scheduled_time=0, deletion_time=1000),
            TracePod("serve-1", 1000, 1024, 1, 200, creation_time=400, scheduled_time=400, deletion_time=500))
    qos = {"explore-1": "BE", "serve-1": "LS"}
    spec = SplitSpec.parse("0:0:1+preempt")
    assert spec.preempt and spec.label == "0:0:1 + preemption"
    run = replay_one((Trace(node, pods), qos, "classes", spec, 42, 1.0, 1.0))
    plain = replay_one((Trace(node, pods), qos, "classes", SplitSpec((0, 0, 1)), 42, 1.0, 1.0))
    assert run.waits == {"exploratory": [100.0], "serving": [90.0]} and plain.waits["serving"] == [600.0]
    assert run.preempt is not None and plain.preempt is None
    assert (run.preempt["preemptions"], run.preempt["max_per_victim"], run.preempt["victims_unfinished"]) == (1, 1, 0)
    assert run.preempt["lost_gpu_s"] == 490.0 and run.preempt["serving_isolated_victim"] == 1
    back = _replay_of(json.loads(json.dumps({**run.__dict__, "never": dict(run.never)})))
    assert back == run
    report_replay("default", [42], 1.0, 1.0, [plain, back])
    out = capsys.readouterr().out
    assert "| classes 0:0:1 + preemption | " in out and "| 1 (1) | 490 / 1,100 |" in out
