"""The link class of a GPU set, and the topology attribute the device plugin publishes (tables and a property)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nomad_gpu.domain.errors import InvalidInventory
from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.domain.topology import GpuPlace, LinkClass, Topology, link_class
from nomad_gpu.domain.topowire import WirePlace, bus_key, decode, encode, to_topology


def g(k: int) -> InstanceId:
    return InstanceId(f"GPU-{k}")


def pairs_two_sockets(n: int = 8) -> Topology:
    """PCIe A100s with bridges: GPU 2k bridged to 2k+1; GPUs 0..n/2-1 on NUMA node 0, under switch k//2."""
    places = {}
    for k in range(n):
        peer = k + 1 if k % 2 == 0 else k - 1
        places[g(k)] = GpuPlace(numa=k * 2 // n, switch=k // 2, peers=((g(peer), 4),))
    return Topology.of(places)


def nvswitch(n: int = 8) -> Topology:
    return Topology.of({g(k): GpuPlace(numa=k * 2 // n, switch=k // 2, nvswitch=True) for k in range(n)})


@pytest.mark.parametrize(("topology", "gpus", "expected"), [
    pytest.param(pairs_two_sockets(), [0, 1], LinkClass.NVLINK, id="one-bridged-pair"),
    pytest.param(pairs_two_sockets(), [0, 1, 2, 3], LinkClass.NVLINK, id="two-whole-pairs"),
    pytest.param(pairs_two_sockets(), [0, 1, 6, 7], LinkClass.NVLINK, id="two-whole-pairs-across-sockets"),
    pytest.param(pairs_two_sockets(), [1, 2], LinkClass.NUMA, id="half-pairs-one-socket"),
    pytest.param(pairs_two_sockets(), [0, 1, 2], LinkClass.NUMA, id="odd-set-cannot-be-covered-by-pairs"),
    pytest.param(pairs_two_sockets(), [1, 2, 3, 4], LinkClass.SYSTEM, id="gpu-1-and-4-have-no-peer-in-set"),
    pytest.param(pairs_two_sockets(), [3, 4], LinkClass.SYSTEM, id="across-sockets"),
    pytest.param(nvswitch(), [0, 3, 5], LinkClass.NVLINK, id="any-subset-of-the-fabric"),
    pytest.param(nvswitch(), list(range(8)), LinkClass.NVLINK, id="all-eight"),
    pytest.param(Topology.of({g(0): GpuPlace(numa=0, switch=0), g(1): GpuPlace(numa=0, switch=0)}), [0, 1],
                 LinkClass.SWITCH, id="one-switch-no-nvlink"),
    pytest.param(Topology.of({g(0): GpuPlace(numa=0)}), [0, 1], LinkClass.SYSTEM, id="one-place-unknown"),
    pytest.param(Topology(), [0, 1], LinkClass.PCIE, id="nothing-known"),
])
def test_link_class(topology: Topology, gpus: list[int], expected: LinkClass) -> None:
    assert topology.link_class([g(k) for k in gpus]) is expected


def test_no_topology_means_pcie_peers_and_one_gpu_has_no_class() -> None:
    assert link_class(None, [g(0), g(1)]) is LinkClass.PCIE
    assert link_class(nvswitch(), [g(0)]) is None
    assert link_class(None, [g(0), g(0)]) is None


def test_tiers_put_nvlink_first_then_one_socket_or_switch_then_anything() -> None:
    assert [c.tier for c in LinkClass] == [0, 0, 1, 1, 2]
    assert LinkClass.NVLINK.label == "NVLink"


def test_nvlink_groups_and_numa_nodes_for_display() -> None:
    assert pairs_two_sockets(4).nvlink_groups() == [(g(0), g(1)), (g(2), g(3))]
    assert nvswitch(4).nvlink_groups() == [(g(0), g(1), g(2), g(3))]
    assert pairs_two_sockets(4).numa_nodes() == [(0, (g(0), g(1))), (1, (g(2), g(3)))]


@pytest.mark.parametrize(("raw", "key"), [
    ("00000000:07:00.0", "0:07:00.0"),
    ("0000:B7:00.0", "0:b7:00.0"),
    ("07:00.0", "0:07:00.0"),
    ("00000001:17:00.1", "1:17:00.1"),
])
def test_bus_ids_in_every_nvml_spelling_meet(raw: str, key: str) -> None:
    assert bus_key(raw) == key


def test_the_published_string_is_small_and_reads_back() -> None:
    places = [WirePlace(f"00000000:{0x07 + 0x10 * k:02X}:00.0", k // 4, k // 2, False,
                        ((f"00000000:{0x07 + 0x10 * (k ^ 1):02X}:00.0", 4),)) for k in range(8)]
    text = encode(places)
    assert text.startswith("1;0:07:00.0/0/0/1*4 0:17:00.0/0/0/0*4 ")
    assert len(text) < 160
    assert [bus_key(p.bus) for p in decode(text)] == [bus_key(p.bus) for p in places]
    topology = to_topology(decode(text), {g(k): p.bus for k, p in enumerate(places)})
    assert topology == Topology.of(
        {g(k): GpuPlace(k // 4, k // 2, False, ((g(k ^ 1), 4),)) for k in range(8)})


def test_entries_for_gpus_outside_the_group_are_dropped() -> None:
    text = encode([WirePlace("0:07:00.0", None, None, True), WirePlace("0:17:00.0", None, None, True)])
    assert text == "1;0:07:00.0/-/-/S 0:17:00.0/-/-/S"
    topology = to_topology(decode(text), {g(0): "00000000:07:00.0"})
    assert topology.places == ((g(0), GpuPlace(nvswitch=True)),)


@pytest.mark.parametrize("bad", [
    "2;0:07:00.0/0/0/-",
    "0:07:00.0/0/0/-",
    "1;0:07:00.0/0/0",
    "1;0:07:00.0/x/0/-",
    "1;0:07:00.0/0/0/0*4",
    "1;0:07:00.0/0/0/5*4",
    "1;0:07:00.0/0/0/- 0000:07:00.0/0/0/-",
    "1;nonsense/0/0/-",
    "1;" + "0:07:00.0/0/0/- " * 1000,
])
def test_a_malformed_attribute_is_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(InvalidInventory):
        decode(bad)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 7), st.booleans(),
                          st.lists(st.tuples(st.integers(0, 15), st.integers(1, 18)), max_size=3)),
                min_size=1, max_size=16))
def test_encode_then_decode_keeps_every_figure(rows: list[tuple[int, int, bool, list[tuple[int, int]]]]) -> None:
    n = len(rows)
    bus = [f"0:{k:02x}:00.0" for k in range(n)]
    places = [WirePlace(bus[k], numa, switch, nvs,
                        tuple(sorted({(bus[p % n], links) for p, links in peers if p % n != k})))
              for k, (numa, switch, nvs, peers) in enumerate(rows)]
    assert decode(encode(places)) == places
