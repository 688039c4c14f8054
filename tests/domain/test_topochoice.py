"""Which free GPUs a whole-GPU ask takes on a node with a published topology (tables and properties)."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.topochoice import choose
from nomad_gpu.domain.topology import GpuPlace, LinkClass, Topology


def g(k: int) -> InstanceId:
    return InstanceId(f"GPU-{k}")


def pairs(n: int = 8) -> Topology:
    """GPU 2k bridged to 2k+1; GPUs 0..n/2-1 on NUMA node 0."""
    return Topology.of({g(k): GpuPlace(numa=k * 2 // n, peers=((g(k ^ 1), 4),)) for k in range(n)})


def fabric(n: int = 8) -> Topology:
    return Topology.of({g(k): GpuPlace(numa=k * 2 // n, nvswitch=True) for k in range(n)})


def ids(*ks: int) -> list[InstanceId]:
    return [g(k) for k in ks]


@pytest.mark.parametrize(("topology", "free", "count", "expected"), [
    pytest.param(pairs(), ids(1, 2, 3, 4, 5, 6), 4, ids(2, 3, 4, 5), id="4-gpus-take-the-two-whole-free-pairs"),
    pytest.param(pairs(), ids(0, 1, 2, 3, 4, 5, 6, 7), 4, ids(0, 1, 2, 3), id="4-gpus-two-pairs-on-one-socket"),
    pytest.param(pairs(), ids(0, 1, 3, 4, 5), 4, ids(0, 1, 4, 5), id="pairs-across-sockets-beat-no-nvlink"),
    pytest.param(pairs(), ids(0, 1, 3, 4, 5, 6), 2, ids(0, 1), id="2-gpus-one-pair"),
    pytest.param(pairs(), ids(0, 1, 3, 5, 6, 7), 1, ids(3), id="1-gpu-breaks-no-pair"),
    pytest.param(pairs(), ids(0, 1, 2, 3, 5), 3, ids(0, 1, 2), id="3-gpus-one-socket-when-no-nvlink-set"),
    pytest.param(pairs(), ids(1, 2, 4, 5, 7), 2, ids(4, 5), id="the-free-pair-not-two-halves"),
    pytest.param(fabric(), ids(*range(8)), 8, ids(*range(8)), id="8-gpus-the-whole-fabric"),
    pytest.param(fabric(), ids(1, 4, 5, 6, 7), 4, ids(4, 5, 6, 7), id="fabric-4-on-one-socket"),
    pytest.param(None, ids(1, 2, 3, 4, 5, 6), 4, ids(1, 2, 3, 4), id="no-topology-first-in-device-order"),
    pytest.param(None, ids(3, 5), 1, ids(3), id="no-topology-one-gpu"),
])
def test_choose(topology: Topology | None, free: list[InstanceId], count: int, expected: list[InstanceId]) -> None:
    assert list(choose(topology, free, count)) == expected


def test_too_few_free_gives_nothing() -> None:
    assert choose(pairs(), ids(0, 1), 3) == ()


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 7), min_size=1), st.integers(1, 8), st.booleans())
def test_an_nvlink_set_is_found_whenever_one_exists(free_set: set[int], count: int, switch: bool) -> None:
    topology = fabric() if switch else pairs()
    free = ids(*sorted(free_set))
    chosen = choose(topology, free, count)
    if len(free) < count:
        assert chosen == ()
        return
    assert len(set(chosen)) == count and set(chosen) <= set(free) and list(chosen) == [x for x in free
                                                                                       if x in chosen]
    exists = count >= 2 and any(topology.link_class(c) is LinkClass.NVLINK for c in combinations(free, count))
    if exists:
        assert topology.link_class(chosen) is LinkClass.NVLINK


@given(st.sets(st.integers(0, 15), min_size=1), st.integers(1, 8))
def test_without_topology_the_choice_is_todays(free_set: set[int], count: int) -> None:
    free = ids(*sorted(free_set))
    assert choose(None, free, count) == (tuple(free[:count]) if len(free) >= count else ())
