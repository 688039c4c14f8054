"""The topology term through the scheduling cycle: NVLink sets first, pairs kept whole, nothing changed without it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.cycle import Admit
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.kinds.whole import WHOLE
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.topology import GpuPlace, LinkClass, Topology

from .builders import A100, admitted, cycle, job, ledger_of, make_node, whole, whole_gpus


def pairs(name: str, n: int = 8) -> Topology:
    """GPU 2k bridged to 2k+1; the first half on NUMA node 0."""
    g = [InstanceId(f"GPU-{name}-{k}") for k in range(n)]
    return Topology.of({g[k]: GpuPlace(numa=k * 2 // n, peers=((g[k ^ 1], 4),)) for k in range(n)})


def no_nvlink(name: str, n: int = 8) -> Topology:
    g = [InstanceId(f"GPU-{name}-{k}") for k in range(n)]
    return Topology.of({g[k]: GpuPlace(numa=k * 2 // n) for k in range(n)})


def gpu(name: str, *ks: int) -> tuple[InstanceId, ...]:
    return tuple(InstanceId(f"GPU-{name}-{k}") for k in ks)


def hold(ledger: Ledger, entry: str, node: str, ks: Sequence[int]) -> None:
    ledger.reserve(EntryId(entry), Team("busy"), [AllocPlacement("g", 0, NodeId(node), 0, 0, gpu(node, *ks), A100,
                                                                 gpu_equivalents=float(len(ks)))])


def topo_node(name: str, topology: Topology | None, n: int = 8) -> object:
    return make_node(name, gpus=whole_gpus(name, n), topology=topology)


@contextmanager
def hooks_off() -> Iterator[None]:
    saved = WHOLE.sets, WHOLE.set_term
    WHOLE.sets = WHOLE.set_term = None
    try:
        yield
    finally:
        WHOLE.sets, WHOLE.set_term = saved


def test_a_4_gpu_job_on_a_pairs_node_takes_two_whole_pairs() -> None:
    ledger = ledger_of(topo_node("a100-1", pairs("a100-1")))  # type: ignore[arg-type]
    hold(ledger, "busy", "a100-1", [0, 3])  # pairs 0-1 and 2-3 are broken; 4-5 and 6-7 are whole
    got = admitted(cycle(ledger, [job("train", whole(4))]), "train")
    (p,) = got.placements
    assert p.instance_ids == gpu("a100-1", 4, 5, 6, 7)


def two_nodes(busy_a: list[int], busy_b: list[int]) -> Ledger:
    ledger = ledger_of(topo_node("a-first", pairs("a-first")), topo_node("b-second", pairs("b-second")))  # type: ignore[arg-type]
    hold(ledger, "busy-a", "a-first", busy_a)
    hold(ledger, "busy-b", "b-second", busy_b)
    return ledger


def test_between_nodes_the_packing_leaves_level_the_nvlink_set_wins() -> None:
    """Both nodes have 4 GPUs free; only the second has them as whole pairs. Before the term the
    first node won (the fitter's node order)."""
    (p,) = admitted(cycle(two_nodes([0, 3, 5, 6], [0, 1, 6, 7]), [job("train", whole(4))]), "train").placements
    assert p.node == NodeId("b-second") and p.instance_ids == gpu("b-second", 2, 3, 4, 5)
    with hooks_off():
        (before,) = admitted(cycle(two_nodes([0, 3, 5, 6], [0, 1, 6, 7]), [job("train", whole(4))]),
                             "train").placements
    assert before.node == NodeId("a-first")


def test_the_term_does_not_undo_packing_a_tighter_node_still_wins() -> None:
    """The first node has exactly 4 GPUs free (no whole pair), the second 6 (three pairs): packing
    keeps the second node's room, and the set on the first says what it is."""
    (p,) = admitted(cycle(two_nodes([0, 3, 5, 6], [0, 1]), [job("train", whole(4))]), "train").placements
    assert p.node == NodeId("a-first") and p.link is LinkClass.SYSTEM


def test_a_1_gpu_job_takes_a_gpu_whose_partner_is_busy() -> None:
    ledger = ledger_of(topo_node("a100-1", pairs("a100-1")))  # type: ignore[arg-type]
    hold(ledger, "busy", "a100-1", [2])
    (p,) = admitted(cycle(ledger, [job("one", whole(1))]), "one").placements
    assert p.instance_ids == gpu("a100-1", 3)


def test_an_8_gpu_job_takes_the_whole_nvswitch_board() -> None:
    g = gpu("hgx", *range(8))
    board = Topology.of({g[k]: GpuPlace(numa=k // 4, nvswitch=True) for k in range(8)})
    ledger = ledger_of(topo_node("hgx", board))  # type: ignore[arg-type]
    (p,) = admitted(cycle(ledger, [job("big", whole(8))]), "big").placements
    assert p.instance_ids == g and board.link_class(p.instance_ids) is LinkClass.NVLINK


def test_nodes_alike_in_free_state_but_not_in_topology_are_not_confused() -> None:
    """Score memos key by the node's free state; the topology must be part of that key."""
    ledger = ledger_of(topo_node("a-plain", no_nvlink("a-plain")), topo_node("b-pairs", pairs("b-pairs")))  # type: ignore[arg-type]
    nfa, nfb = ledger.node_free(NodeId("a-plain")), ledger.node_free(NodeId("b-pairs"))
    assert nfa is not None and nfb is not None and nfa.signature() != nfb.signature()
    (p,) = admitted(cycle(ledger, [job("two", whole(2))]), "two").placements
    assert p.node == NodeId("b-pairs")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(0, 2)), min_size=1, max_size=12),
       st.lists(st.sets(st.integers(0, 7), max_size=6), min_size=2, max_size=2))
def test_without_topology_every_decision_is_todays(asks: list[tuple[int, int]], busy: list[set[int]]) -> None:
    def run() -> list[tuple[str, tuple[tuple[str, tuple[InstanceId, ...]], ...]]]:
        ledger = ledger_of(*(make_node(f"n{i}", gpus=whole_gpus(f"n{i}", 8)) for i in range(2)))
        for i, ks in enumerate(busy):
            if ks:
                hold(ledger, f"busy{i}", f"n{i}", sorted(ks))
        queue = [job(f"j{k}", whole(n), at=float(k), cpu=100 * c) for k, (n, c) in enumerate(asks)]
        result = cycle(ledger, queue, now=100.0)
        return [(str(d.entry), tuple((str(p.node), p.instance_ids) for p in d.placements)
                 if isinstance(d, Admit) else ()) for d in result.decisions]

    with_hooks = run()
    with hooks_off():
        assert run() == with_hooks


@pytest.mark.parametrize("policy", ["fgd", "best-fit", "first-fit"])
def test_other_policies_take_nvlink_sets_on_a_node_too(policy: str) -> None:
    ledger = ledger_of(topo_node("a100-1", pairs("a100-1")))  # type: ignore[arg-type]
    hold(ledger, "busy", "a100-1", [1, 2])
    (p,) = admitted(cycle(ledger, [job("pair", whole(2))], policy=policy), "pair").placements
    assert pairs("a100-1").link_class(p.instance_ids) is LinkClass.NVLINK


def test_a_placement_says_how_its_gpus_are_joined() -> None:
    ledger = ledger_of(topo_node("a100-1", pairs("a100-1")))  # type: ignore[arg-type]
    hold(ledger, "busy", "a100-1", [0])
    (four,) = admitted(cycle(ledger, [job("four", whole(4))]), "four").placements
    (one,) = admitted(cycle(ledger, [job("one", whole(1))]), "one").placements
    assert four.link is LinkClass.NVLINK and one.link is None
    stock = ledger_of(make_node("stock", gpus=whole_gpus("stock", 8)))
    (two,) = admitted(cycle(stock, [job("two", whole(2))]), "two").placements
    assert two.link is LinkClass.PCIE  # no topology published: nothing is known of how they are joined
    assert two.link.label == "topology unknown"  # not "PCIe": the stock plugin says nothing, NVLink or not
