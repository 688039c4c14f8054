"""The MIG re-layout planner: tables for the issue's cases, properties over random GPUs and queues."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.miglayout import (
    MigGeometry,
    Placed,
    arrange,
    check_layout,
    format_layout,
    geometry_for,
    parse_layout,
)
from nomad_gpu.domain.migplanner import MigAsk, MigGpu, MigInstance, PlanSettings, plan

MODEL = "NVIDIA H100 80GB HBM3"
_G = geometry_for(MODEL, [("3g.40gb", 4)])
assert _G is not None
H100: MigGeometry = _G
NODE = NodeId("node-1")


def gpu(uuid: str, layout: str, busy: Sequence[int] = (), node: NodeId = NODE, opted_in: bool = True,
        last_relayout_at: float | None = None) -> MigGpu:
    """A GPU from `profile@start` items; `busy` lists the starts of the instances in use."""
    placed = parse_layout(layout, H100)
    instances = tuple(MigInstance(f"MIG-{uuid}-{p.start}", p, p.start in busy) for p in placed)
    return MigGpu(node, uuid, MODEL, H100, instances, opted_in, last_relayout_at)


def test_the_gpu_whose_idle_instances_make_room_is_relaid_the_other_never() -> None:
    # Two GPUs laid out 3g@0 + 1g@4,5,6; both 3g busy, and one 1g busy on GPU-a (at slice 4).
    a = gpu("GPU-a", "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=(0, 4))
    b = gpu("GPU-b", "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=(0,))
    (got,) = plan([a, b], [MigAsk("e1", "3g.40gb")], now=0.0)
    assert got.gpu == "GPU-b" and got.admits == ("e1",)
    assert got.layout == "3g.40gb@0,3g.40gb@4"
    assert sorted(got.destroy) == ["MIG-GPU-b-4", "MIG-GPU-b-5", "MIG-GPU-b-6"]
    assert got.create == (Placed(4, 4, "3g.40gb"),)
    assert plan([a], [MigAsk("e1", "3g.40gb")], now=0.0) == ()


def test_no_relayout_makes_a_3g_when_busy_1g_block_both_3g_starts() -> None:
    # 3g may start only at 0 or 4: a busy 1g in each half leaves no 3g placement however the rest moves.
    seven = ",".join(f"1g.10gb@{s}" for s in range(7))
    assert plan([gpu("GPU-a", seven, busy=(1, 4))], [MigAsk("e1", "3g.40gb")], now=0.0) == ()


def test_seven_1g_with_only_slice_4_busy_can_still_make_a_3g_at_0() -> None:
    # The second example says no re-layout can make a 3g here; the placement table (3g at 0 or
    # 4, four slices; reference layout "3g@0 1g@4 1g@5 1g@6") says 3g@0 fits beside a 1g at 4.
    seven = ",".join(f"1g.10gb@{s}" for s in range(7))
    (got,) = plan([gpu("GPU-a", seven, busy=(4,))], [MigAsk("e1", "3g.40gb")], now=0.0)
    assert got.layout == "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6"
    assert sorted(got.destroy) == [f"MIG-GPU-a-{s}" for s in range(4)]


def test_an_ask_an_idle_instance_serves_gets_no_relayout() -> None:
    a = gpu("GPU-a", "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6")
    assert plan([a], [MigAsk("e1", "3g.40gb")], now=0.0) == ()
    # ...but a second 3g ask, which the idle 3g cannot also serve, gets one (keeping the idle 3g).
    (got,) = plan([a], [MigAsk("e1", "3g.40gb"), MigAsk("e2", "3g.40gb")], now=0.0)
    assert got.admits == ("e2",) and got.layout == "3g.40gb@0,3g.40gb@4"
    assert "MIG-GPU-a-0" not in got.destroy


def test_the_earlier_ask_wins_when_one_gpu_can_serve_only_one() -> None:
    a = gpu("GPU-a", "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=(0,))
    (got,) = plan([a], [MigAsk("first", "2g.20gb"), MigAsk("second", "3g.40gb")], now=0.0)
    assert got.admits == ("first",)
    (got,) = plan([a], [MigAsk("first", "3g.40gb"), MigAsk("second", "2g.20gb")], now=0.0)
    assert got.admits == ("first",)


def test_unused_slices_are_filled_with_default_profiles() -> None:
    a = gpu("GPU-a", "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=(0,))
    (got,) = plan([a], [MigAsk("e1", "3g.40gb")], now=0.0)
    # 3g@4 destroys three idle 1g (4, 5, 6); 3g@0 would also destroy three but hit the busy 1g@0.
    assert got.layout == "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,3g.40gb@4"
    settings = PlanSettings(default_profiles={H100.family: ("2g.20gb",)})
    b = gpu("GPU-b", "4g.40gb@0,1g.10gb@4", busy=())
    (got,) = plan([b], [MigAsk("e1", "3g.40gb"), MigAsk("e2", "3g.40gb")], now=0.0, settings=settings)
    assert got.layout == "3g.40gb@0,3g.40gb@4"


def test_one_relayout_per_node_in_flight_nodes_and_cooling_gpus_are_skipped() -> None:
    a = gpu("GPU-a", "1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=())
    b = gpu("GPU-b", "1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=())
    asks = [MigAsk("e1", "7g.80gb"), MigAsk("e2", "7g.80gb")]
    got = plan([a, b], asks, now=0.0)
    assert [r.gpu for r in got] == ["GPU-a"]  # the second GPU waits for the first re-layout to end
    assert plan([a, b], asks, now=0.0, busy_nodes=[NODE]) == ()
    cooling = gpu("GPU-a", "1g.10gb@4", last_relayout_at=100.0)
    assert plan([cooling], asks, now=150.0, settings=PlanSettings(cool_down_s=60.0)) == ()
    assert len(plan([cooling], asks, now=160.0, settings=PlanSettings(cool_down_s=60.0))) == 1
    assert plan([gpu("GPU-a", "1g.10gb@4", opted_in=False)], asks, now=0.0) == ()


def test_nodes_are_planned_independently() -> None:
    a = gpu("GPU-a", "1g.10gb@4", node=NodeId("n1"))
    b = gpu("GPU-b", "1g.10gb@4", node=NodeId("n2"))
    got = plan([a, b], [MigAsk("e1", "7g.80gb"), MigAsk("e2", "7g.80gb")], now=0.0)
    assert sorted((r.node, r.admits) for r in got) == [("n1", ("e1",)), ("n2", ("e2",))]


def test_an_ask_for_another_model_or_profile_table_is_not_served() -> None:
    a = gpu("GPU-a", "1g.10gb@4")
    assert plan([a], [MigAsk("e1", "3g.40gb", models=frozenset({"NVIDIA A100-SXM4-80GB"}))], now=0.0) == ()
    assert plan([a], [MigAsk("e1", "3g.20gb")], now=0.0) == ()


# ---- properties ------------------------------------------------------------------------------------
NAMES = [s.name for s in H100.shapes if "+" not in s.name]


@st.composite
def gpus_and_asks(draw: st.DrawFn) -> tuple[list[MigGpu], list[MigAsk]]:
    gpus = []
    for n in range(draw(st.integers(1, 4))):
        layout = arrange(H100, draw(st.lists(st.sampled_from(NAMES), max_size=7))) or ()
        instances = tuple(MigInstance(f"MIG-{n}-{p.start}", p, draw(st.booleans())) for p in layout)
        node = NodeId(f"n{draw(st.integers(0, 1))}")
        gpus.append(MigGpu(node, f"GPU-{n}", MODEL, H100, instances, opted_in=draw(st.booleans())))
    asks = [MigAsk(f"e{k}", draw(st.sampled_from(NAMES)), draw(st.integers(1, 2)))
            for k in range(draw(st.integers(0, 5)))]
    return gpus, asks


@given(gpus_and_asks())
def test_plans_never_touch_busy_instances_and_every_layout_is_valid(case: tuple[list[MigGpu], list[MigAsk]]) -> None:
    gpus, asks = case
    plans = plan(gpus, asks, now=0.0)
    assert len({r.node for r in plans}) == len(plans)  # at most one per node
    admitted = [k for r in plans for k in r.admits]
    assert len(admitted) == len(set(admitted))  # an ask is served by one re-layout
    for r in plans:
        g = next(x for x in gpus if x.uuid == r.gpu)
        assert g.opted_in and r.node == g.node and r.admits
        assert check_layout(H100, r.after) is None
        assert r.before == tuple(sorted(i.placed for i in g.instances))
        busy = [i for i in g.instances if i.busy]
        assert all(i.placed in r.after and i.id not in r.destroy for i in busy)
        assert set(r.destroy) <= {i.id for i in g.instances if not i.busy}
        survivors = [i.placed for i in g.instances if i.id not in r.destroy]
        assert sorted([*survivors, *r.create]) == sorted(r.after)
        # The asks it admits find their instances among the new ones (plus idle ones of the node).
        made = [p.profile for p in r.create]
        for key in r.admits:
            ask = next(a for a in asks if a.key == key)
            assert ask.profile in made
        assert format_layout(r.after) == r.layout


@given(gpus_and_asks())
def test_same_input_same_plan(case: tuple[list[MigGpu], list[MigAsk]]) -> None:
    gpus, asks = case
    assert plan(gpus, asks, now=0.0) == plan(list(gpus), list(asks), now=0.0)


def test_waiting_mig_asks_come_from_plain_and_tiered_asks_in_order() -> None:
    from nomad_gpu.domain.ids import EntryId, Team
    from nomad_gpu.domain.requests import AllocAsk, JobRequest, MigSlices, WholeGpus

    def job(entry: str, *asks: AllocAsk) -> JobRequest:
        return JobRequest(EntryId(entry), Team("t"), asks)

    waiting = [
        job("whole", AllocAsk("g", gpu=WholeGpus(1))),
        job("serving", AllocAsk("g", tiers=((WholeGpus(1),), (MigSlices("3g.40gb"), MigSlices("4g.40gb"))))),
        job("plain", AllocAsk("g", gpu=MigSlices("1g.10gb", 2))),
        job("two-groups", AllocAsk("a", gpu=MigSlices("1g.10gb")), AllocAsk("b", gpu=MigSlices("1g.10gb"))),
    ]
    from nomad_gpu.domain.migplanner import waiting_mig_asks
    assert waiting_mig_asks(waiting) == [MigAsk("serving", "3g.40gb"), MigAsk("plain", "1g.10gb", 2)]


def test_an_idle_instance_on_a_node_the_job_cannot_use_does_not_stop_a_relayout_where_it_can() -> None:
    """A 3g.40gb idle on a node without the job's CPU beside it serves no one: the ask that may run only
    on node-2 gets node-2's GPU re-laid, where an ask with no node limit takes the idle 3g as its own."""
    full = gpu("GPU-a", "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=(4,), node=NodeId("node-1"))
    room = gpu("GPU-b", "3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6", busy=(0,), node=NodeId("node-2"))
    assert plan([full, room], [MigAsk("e1", "3g.40gb")], now=0.0) == ()
    (got,) = plan([full, room], [MigAsk("e1", "3g.40gb", nodes=frozenset({NodeId("node-2")}))], now=0.0)
    assert (got.gpu, got.layout, got.admits) == ("GPU-b", "3g.40gb@0,3g.40gb@4", ("e1",))
    assert plan([full, room], [MigAsk("e1", "3g.40gb", nodes=frozenset())], now=0.0) == ()


def test_waiting_mig_asks_name_the_nodes_with_the_job_s_cpu_memory_and_scope_free() -> None:
    from nomad_gpu.domain.freeindex import NodeFree
    from nomad_gpu.domain.ids import EntryId, InstanceId, Team
    from nomad_gpu.domain.inventory import MigSlice, Node
    from nomad_gpu.domain.migplanner import waiting_mig_asks
    from nomad_gpu.domain.requests import AllocAsk, JobRequest, MigSlices
    from nomad_gpu.domain.units import MigProfile

    def node(name: str, cpu: int, pool: str = "default") -> Node:
        mig = MigSlice(InstanceId(f"{name}-mig"), MODEL, MigProfile.parse("3g.40gb"), 40448, pci_bus_id=name)
        return Node(NodeId(name), name=name, cpu_mhz=cpu, memory_mb=65536, migs=(mig,), node_pool=pool)

    frees = [NodeFree.of(node("small", 1000), ()), NodeFree.of(node("big", 8000), ()),
             NodeFree.of(node("other-pool", 8000, pool="batch"), ())]
    job = JobRequest(EntryId("e1"), Team("t"), (AllocAsk("g", cpu_mhz=4000, memory_mb=1024, gpu=MigSlices("3g.40gb")),),
                     node_pool="default")
    (ask,) = waiting_mig_asks([job], frees)
    assert ask.nodes == frozenset({NodeId("big")})
    (unlimited,) = waiting_mig_asks([job])
    assert unlimited.nodes is None
