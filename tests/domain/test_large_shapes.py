"""Large shapes: multi-GPU asks and model-bound ones, whose few homes FGD's measure does not protect.

Before they were modelled, `frag-aware` sent CPU-heavy work to the big, CPU-rich nodes (the
stranded key prefers them) and the rare 120-core 8-GPU task, which only those nodes can run,
failed while FGD, breaking its ties by node order, still placed it (docs/packing.md).
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from nomad_gpu.domain.fit import FitContext, Fitter
from nomad_gpu.domain.fragaware import fold_large
from nomad_gpu.domain.fragmentation import TAKES_SHARES, TAKES_WHOLE, Demand, GpuState, RoomLeft, Shape
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import MILLI_PER_GPU, EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.placement import AllocPlacement, NoFit
from nomad_gpu.domain.policies import get_policy
from nomad_gpu.domain.requests import AllocAsk, GpuShare, JobRequest, WholeGpus

from .builders import gpu_node, ledger_of

SMALL = Shape(1, 500, 6_000)
"""The typical task: half a GPU and 6 cores."""
HUGE = Shape(8, 1000, 120_000)
"""A rare whole-node task that needs 120 cores."""
BIG_CPU, MID_CPU = 128_000, 96_000


def demand() -> Demand:
    return Demand.from_shapes(Counter({SMALL: 100, HUGE: 2}))


def test_rare_shapes_larger_than_every_typical_one_are_large() -> None:
    counts = Counter({SMALL: 100, Shape(1, 200, 1_000): 2, HUGE: 2, Shape(2, 1000, 8_000): 1})
    got = Demand.from_shapes(counts)
    assert [s for s, _ in got.shapes] == [SMALL]
    assert {s: round(p, 3) for s, p in got.large} == {HUGE: 0.667, Shape(2, 1000, 8_000): 0.333}


def test_multi_gpu_shapes_are_large_even_when_typical() -> None:
    # on traces where 8-GPU tasks are common enough to be typical, FGD's measure sees them only
    # inside its integer ties, and the stranded key sent CPU-heavy work to their only homes
    # (docs/packing.md, "Beyond the two bundled traces": multigpu30 fell 2.02 points behind FGD)
    got = Demand.from_shapes(Counter({SMALL: 10, HUGE: 10}))
    assert {s for s, _ in got.shapes} == {SMALL, HUGE}
    assert got.large == ((HUGE, 1.0),)


def test_typical_shapes_bound_to_models_are_large_and_unbound_one_gpu_shapes_are_not() -> None:
    p100 = Shape(1, 810, 3_000, frozenset({"P100"}))
    rare_bound = Shape(1, 1000, 2_000, frozenset({"V100"}))
    counts = Counter({SMALL: 100, p100: 30, Shape(1, 1000, 12_000): 40, rare_bound: 1})
    got = Demand.from_shapes(counts)
    assert rare_bound not in {s for s, _ in got.shapes}  # too rare to be typical: F ignores it, so do we
    assert got.large == ((p100, 1.0),)


def test_no_large_shapes_when_no_shape_asks_for_several_gpus_or_names_a_model() -> None:
    assert Demand.from_shapes(Counter({SMALL: 10, Shape(1, 1000, 12_000): 10})).large == ()


def test_large_shapes_are_weighted_by_how_little_room_the_cluster_has_for_them() -> None:
    counts = Counter({SMALL: 100, HUGE: 1, Shape(8, 1000, 64_000): 1, Shape(16, 1000, 0): 1})
    nodes = [gpu_node("big", cpu=BIG_CPU)] + [gpu_node(f"mid{k}", cpu=MID_CPU) for k in range(3)]
    got = Demand.from_shapes(counts).scarce_on(NodeFree.of(n, ()) for n in nodes)
    # HUGE fits one node of four, the 64-core one all four (a copy each), the 16-GPU one none (dropped)
    assert {s: w for s, w in got.large} == {HUGE: 1.0, Shape(8, 1000, 64_000): 0.25}
    assert got.shapes == Demand.from_shapes(counts).shapes


def place_cpu_heavy_then_huge(d: Demand) -> tuple[NodeId | None, bool]:
    """A 1-GPU, 24-core task then the 120-core 8-GPU one, on a 128-core and a 96-core 8-GPU node;
    the 128-core node comes first in the priority order."""
    ledger = ledger_of(gpu_node("big", cpu=BIG_CPU), gpu_node("mid", cpu=MID_CPU))
    rank = {NodeId("big"): 0, NodeId("mid"): 1}
    fitter = Fitter(ledger.index, FitContext(get_policy("frag-aware"), d, per_class_limit=None, rank=rank))
    first = JobRequest(EntryId("cpu-heavy"), Team("a"), (AllocAsk("g", 0, 24_000, 0, WholeGpus(1)),))
    got = fitter.fit_job(first)
    assert not isinstance(got, NoFit)
    ledger.reserve(first.entry, first.team, got)
    (where,) = {p.node for p in got}
    huge = JobRequest(EntryId("huge"), Team("a"), (AllocAsk("g", 0, 120_000, 0, WholeGpus(8)),))
    return where, not isinstance(Fitter(ledger.index, FitContext(get_policy("frag-aware"), d, per_class_limit=None,
                                                                  rank=rank)).fit_job(huge), NoFit)


def test_cpu_heavy_work_leaves_the_only_home_of_a_large_shape_whole() -> None:
    d = demand()
    nodes = [NodeFree.of(gpu_node("big", cpu=BIG_CPU), ()), NodeFree.of(gpu_node("mid", cpu=MID_CPU), ())]
    assert place_cpu_heavy_then_huge(d.scarce_on(nodes)) == (NodeId("mid"), True)
    assert place_cpu_heavy_then_huge(d) == (NodeId("mid"), True)  # unweighted, it still counts


def test_without_large_shapes_the_stranded_key_takes_the_big_node() -> None:
    """What the large key corrects: FGD ties, the stranded key prefers the CPU-rich node."""
    d = demand()
    assert place_cpu_heavy_then_huge(Demand(d.shapes)) == (NodeId("big"), False)


keys = st.tuples(st.integers(0, 100), st.integers(0, 999), st.floats(-64_000, 64_000), st.floats(0, 1))


@given(keys, keys)
def test_folded_keys_order_as_the_keys_do(a: tuple[int, int, float, float], b: tuple[int, int, float, float]) -> None:
    def order(k: tuple[int, int, float, float]) -> tuple[int, int, float, float]:
        return (k[0], -k[1], round(k[2], 2), -round(k[3], 1))

    a = (a[0], a[1], round(a[2], 2), round(a[3], 1))
    b = (b[0], b[1], round(b[2], 2), round(b[3], 1))
    if order(a) > order(b):
        assert fold_large(*a) > fold_large(*b)
    elif order(a) == order(b):
        assert fold_large(*a) == fold_large(*b)


def huge_ask(k: int = 0) -> AllocAsk:
    return AllocAsk("g", k, HUGE.cpu_mhz, 0, WholeGpus(HUGE.gpus))


def nodes_free(*cpus: int) -> list[NodeFree]:
    return [NodeFree.of(gpu_node(f"n{k}", cpu=cpu), ()) for k, cpu in enumerate(cpus)]


def test_room_beyond_the_waiting_large_tasks_is_not_kept() -> None:
    """In a queue a large task that finds no room waits; room kept for tasks that are not there
    strands GPUs by sending CPU-heavy work elsewhere (docs/packing.md, the replay)."""
    d = demand()
    assert d.needed_now(nodes_free(BIG_CPU), []).large == ()  # none waiting
    assert d.needed_now(nodes_free(BIG_CPU, BIG_CPU), [huge_ask()]).large == ()  # two homes, one task
    assert d.needed_now(nodes_free(MID_CPU), [huge_ask()]).large == ()  # no home at all: nothing to keep


def test_room_all_spoken_for_by_waiting_large_tasks_is_kept() -> None:
    d = demand()
    kept = d.needed_now(nodes_free(BIG_CPU, MID_CPU), [huge_ask(), AllocAsk("g", 1, 6_000, 0, WholeGpus(1))])
    assert kept.large == d.large
    assert d.needed_now(nodes_free(BIG_CPU, BIG_CPU), [huge_ask(0), huge_ask(1)]).large == d.large


def test_a_trimmed_demand_shares_the_fragmentation_memo() -> None:
    d = demand()
    trimmed = d.needed_now(nodes_free(BIG_CPU), [])
    assert trimmed.shapes == d.shapes and trimmed is d.needed_now(nodes_free(BIG_CPU), [])
    state = nodes_free(BIG_CPU)[0]
    assert trimmed.fragmentation(state) == d.fragmentation(state)
    assert d._memo is trimmed._memo


def test_the_cycle_keeps_no_room_for_large_tasks_that_are_not_queued() -> None:
    """One CPU-heavy task, no 8-GPU task waiting: the cycle places it as the three-key policy
    would, on the CPU-rich node; with the 8-GPU task queued behind it, it leaves that node whole."""
    from nomad_gpu.domain.cycle import Admit, run_cycle

    def first_node(with_huge: bool) -> NodeId:
        ledger = ledger_of(gpu_node("big", cpu=BIG_CPU), gpu_node("mid", cpu=MID_CPU))
        heavy = JobRequest(EntryId("a-heavy"), Team("a"), (AllocAsk("g", 0, 24_000, 0, WholeGpus(1)),),
                           submitted_at=0.0)
        huge = JobRequest(EntryId("b-huge"), Team("a"), (huge_ask(),), submitted_at=1.0)
        got = run_cycle(ledger, [heavy, huge] if with_huge else [heavy], now=2.0, demand=demand())
        (admit,) = [d for d in got.decisions if isinstance(d, Admit) and d.entry == heavy.entry]
        (node,) = {p.node for p in admit.placements}
        return node

    assert first_node(with_huge=False) == NodeId("big")
    assert first_node(with_huge=True) == NodeId("mid")


P100_ONLY = Shape(1, 810, 3_000, frozenset({"P100"}))
"""A light share that only the scarce model's GPUs can take."""
HEAVY = Shape(1, 1000, 8_000)
"""The common CPU-heavy task: on a 16-core 2-GPU node one copy leaves too little CPU for a second."""
MIX = Counter({HEAVY: 60, Shape(1, 500, 4_000): 20, P100_ONLY: 20})


def place_light_unbound(d: Demand) -> NodeId:
    """A light one-GPU task free to run on any model, on a CPU-poor 2-GPU P100 node and a 96-core
    8-GPU one that comes first in the node order."""
    ledger = ledger_of(gpu_node("p100", 2, "P100", cpu=16_000), gpu_node("g2", 8, "G2", cpu=96_000))
    rank = {NodeId("g2"): 0, NodeId("p100"): 1}
    fitter = Fitter(ledger.index, FitContext(get_policy("frag-aware"), d, per_class_limit=None, rank=rank))
    got = fitter.fit_job(JobRequest(EntryId("light"), Team("a"), (AllocAsk("g", 0, 1_000, 0, WholeGpus(1)),)))
    assert not isinstance(got, NoFit)
    (where,) = {p.node for p in got}
    return where


def test_light_work_leaves_the_scarce_models_gpus_to_the_tasks_bound_to_them() -> None:
    """The stranded key alone sends light work to the P100 node, to use the GPU a heavy task would
    strand there; on the gpuspec* traces the P100-only tasks then failed early (docs/packing.md)."""
    d = Demand.from_shapes(MIX)
    assert d.large == ((P100_ONLY, 1.0),)
    assert place_light_unbound(Demand(d.shapes)) == NodeId("p100")
    assert place_light_unbound(d) == NodeId("g2")


def p100_share(k: int) -> AllocAsk:
    return AllocAsk("g", k, 3_000, 0, GpuShare(810, frozenset({"P100"})))


def test_room_for_a_model_bound_shape_is_kept_only_while_its_waiting_tasks_need_it() -> None:
    d = Demand.from_shapes(MIX)
    p100 = [NodeFree.of(gpu_node("p100", 2, "P100", cpu=16_000), ())]
    assert d.needed_now(p100, [p100_share(0), p100_share(1)]).large == d.large
    assert d.needed_now(p100, [p100_share(0)]).large == ()  # two GPUs' room, one task waiting


gpu_states = st.lists(st.tuples(st.sampled_from(("P100", "G2", "T4")), st.sampled_from((TAKES_WHOLE, TAKES_SHARES,
                                                                                         TAKES_WHOLE | TAKES_SHARES)),
                                st.integers(0, 1000)), max_size=8).map(tuple)


def copies_counted_alone(shape: Shape, state: GpuState, cpu_free: int) -> int:
    """Copies of one shape that fit by whole free GPUs of an allowed model and by CPU, from the state."""
    whole = sum(1 for model, kind, free in state
                if kind & TAKES_WHOLE and free >= MILLI_PER_GPU and (not shape.models or model in shape.models))
    fits = whole // max(1, shape.gpus)
    return min(fits, max(0, cpu_free) // shape.cpu_mhz) if shape.cpu_mhz > 0 else fits


@given(gpu_states, st.integers(0, 130_000))
def test_room_for_large_shapes_is_the_weighted_sum_of_copies_of_each(state: GpuState, cpu: int) -> None:
    """`large_capacity` counts free GPUs by model once for all shapes; it must agree with counting
    copies of each shape on its own."""
    d = Demand.from_shapes(Counter({HEAVY: 50, P100_ONLY: 20, HUGE: 5, Shape(2, 1000, 0, frozenset({"G2", "T4"})): 5}))
    expected = sum(w * copies_counted_alone(s, state, cpu) for s, w in d.large)
    assert abs(d.large_capacity(state, cpu) - expected) < 1e-12


P100_BOUND = Shape(1, 1000, 2_000, frozenset({"P100"}))
V100_BOUND = Shape(1, 1000, 2_000, frozenset({"V100"}))
SCARCE_MIX = Counter({Shape(1, 1000, 2_000): 50, P100_BOUND: 25, V100_BOUND: 25})
"""Light work free to run anywhere, and as much again bound to one of two scarce models."""


def scarce_models_cluster() -> list[Node]:
    """Eight one-GPU P100 nodes and four one-GPU V100 nodes: each model's bound tasks have few homes."""
    return ([gpu_node(f"p{k}", 1, "P100", cpu=8_000) for k in range(8)]
            + [gpu_node(f"v{k}", 1, "V100", cpu=8_000) for k in range(4)])


def gpu_taken(nf: NodeFree) -> NodeFree:
    """`nf` (a one-GPU node) with its GPU taken whole."""
    gpu = nf.node.gpus[0]
    return nf.take(AllocPlacement("g", 0, nf.id, 1_000, 0, (gpu.id,), gpu.model))


def test_large_shapes_weigh_by_the_room_left_for_them_not_by_the_empty_cluster() -> None:
    d = Demand.from_shapes(SCARCE_MIX)
    empty = [NodeFree.of(n, ()) for n in scarce_models_cluster()]
    assert dict(d.scarce_on(empty).large) == {P100_BOUND: 0.5, V100_BOUND: 1.0}  # 8 homes against 4
    # six of the P100 GPUs taken (the first six nodes): two left, against four V100s
    taken = [gpu_taken(nf) if k < 6 else nf for k, nf in enumerate(empty)]
    assert dict(d.scarce_on(taken).large) == {P100_BOUND: 1.0, V100_BOUND: 0.5}
    # a shape with no room left has none to lose
    gone = [gpu_taken(nf) if nf.node.gpus[0].model == "P100" else nf for nf in empty]
    assert dict(d.scarce_on(gone).large) == {V100_BOUND: 1.0}


def test_weights_move_only_when_a_shapes_room_crosses_a_power_of_two() -> None:
    d = Demand.from_shapes(SCARCE_MIX)
    assert Demand.room_levels([0, 1, 2, 3, 4, 7, 8]) == (0, 1, 2, 2, 3, 3, 4)
    assert d.weighed([5, 4]) is d.weighed([7, 6])  # the same weights: one object, its memos kept
    assert d.weighed([8, 4]) is not d.weighed([7, 4])
    again = d.weighed([8, 4])
    assert again.weighed([3, 4]) is d.weighed([3, 4])  # re-weighing a weighed demand starts from the frequencies
    assert again._memo is d._memo and again._stranded_memo is d._stranded_memo


def place_one_by_one(d: Demand, tasks: list[AllocAsk], *, reweigh: bool) -> list[NodeId | None]:
    """Place `tasks` in order as the packing experiment does (the P100 nodes first in the node
    order), re-weighing the demand as placements take room (`RoomLeft`) or keeping its weights."""
    nodes = scarce_models_cluster()
    ledger = ledger_of(*nodes)
    rank = {n.id: k for k, n in enumerate(nodes)}
    demand = d.scarce_on(ledger.index.nodes())
    room = RoomLeft(demand, ledger.index)
    where: list[NodeId | None] = []
    for k, ask in enumerate(tasks):
        job = JobRequest(EntryId(f"t{k}"), Team("a"), (ask,))
        got = Fitter(ledger.index, FitContext(get_policy("frag-aware"), demand, per_class_limit=None,
                                              rank=rank)).fit_job(job)
        if isinstance(got, NoFit):
            where.append(None)
            continue
        before = [ledger.index.get(p.node) for p in got]
        ledger.reserve(job.entry, job.team, got)
        where.append(got[0].node)
        if reweigh and (weighed := room.moved(before)) is not None:
            demand = weighed
    return where


def bound_to(model: str, k: int) -> AllocAsk:
    return AllocAsk("g", k, 2_000, 0, WholeGpus(1, frozenset({model})))


def test_light_work_spreads_over_the_scarce_models_as_their_room_shrinks() -> None:
    """On the gpuspec* traces FGD's score sends light work free to run anywhere to the small nodes
    of scarce models; weighed by the empty cluster, all of it went to the model with more homes
    until its own tasks found none (docs/packing.md, "Beyond the two bundled traces")."""
    d = Demand.from_shapes(SCARCE_MIX)
    light = [AllocAsk("g", k, 2_000, 0, WholeGpus(1)) for k in range(6)]
    bound = [bound_to("P100", k) for k in range(3)] + [bound_to("V100", k) for k in range(3)]
    fixed = place_one_by_one(d, light + bound, reweigh=False)
    assert all(str(n).startswith("p") for n in fixed[:6])  # the P100s' weight never rose
    assert None in fixed[6:9]  # and a P100-bound task found no P100 left
    moving = place_one_by_one(d, light + bound, reweigh=True)
    assert {str(n)[0] for n in moving[:6] if n} == {"p", "v"}
    assert None not in moving  # every bound task still found its model


@given(st.lists(st.tuples(st.integers(0, 11), st.sampled_from((None, "P100", "V100"))), max_size=20))
def test_the_room_kept_placement_by_placement_is_the_room_counted_afresh(asks: list[tuple[int, str | None]]) -> None:
    d = Demand.from_shapes(Counter({**SCARCE_MIX, Shape(2, 1000, 4_000): 5}))
    ledger = ledger_of(*scarce_models_cluster(), gpu_node("g", 8, "G2", cpu=32_000))
    room = RoomLeft(d, ledger.index)
    for k, (cpu_cores, model) in enumerate(asks):
        ask = AllocAsk("g", k, cpu_cores * 1_000, 0, WholeGpus(1, frozenset({model}) if model else frozenset()))
        job = JobRequest(EntryId(f"t{k}"), Team("a"), (ask,))
        got = Fitter(ledger.index, FitContext(get_policy("first-fit"), None, per_class_limit=None)).fit_job(job)
        if isinstance(got, NoFit):
            continue
        before = [ledger.index.get(p.node) for p in got]
        ledger.reserve(job.entry, job.team, got)
        room.moved(before)
        counted = [sum(c) for c in zip(*(d.room_of(nf) for nf in ledger.index.nodes()), strict=True)]
        assert room.room == counted
        assert room.levels == Demand.room_levels(counted)
