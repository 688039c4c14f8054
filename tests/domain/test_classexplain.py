"""The words shown for a class's choice and for a class that waits."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.classes import DEFAULT_CLASS_POLICY, GIB, MIB, Size, WorkloadClass
from nomad_gpu.domain.classexplain import Choice, device_text, gib, wait_text

S, T, E = WorkloadClass.SERVING, WorkloadClass.TRAINING, WorkloadClass.EXPLORATORY


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        pytest.param(14 * GIB, "14 GiB", id="whole"),
        pytest.param(9984 * MIB, "9.75 GiB", id="quarter"),
        pytest.param(15 * 10**9, "13.97 GiB", id="15gb-rounded-up"),
        pytest.param(GIB + 1, "1.01 GiB", id="a-byte-over-never-shown-smaller"),
        pytest.param(20096 * MIB, "19.63 GiB", id="2g.20gb"),
    ],
)
def test_gib(amount: int, text: str) -> None:
    assert gib(amount) == text


def test_a_choice_says_what_where_why_and_which_tier() -> None:
    serving = Choice(S, Size(14 * GIB), "mig", device_text("mig", "NVIDIA H100 80GB HBM3", profile="3g.40gb"),
                     "h100-mig-1", 1)
    assert serving.text() == "serving -> MIG 3g.40gb on h100-mig-1: needs 14 GiB; isolated; tier 1"
    share = Choice(E, Size(10 * GIB), "share", device_text("share", "NVIDIA L40S", milli=250), "l40s-1", 1)
    assert share.text() == "exploratory -> share 250/1000 of NVIDIA L40S on l40s-1: needs 10 GiB; time-shared; tier 1"
    training = Choice(T, Size(None, 2), "gpu", device_text("gpu", "NVIDIA H100 80GB HBM3", count=2), "h100-1", 1)
    assert training.text() == "training -> 2 whole GPUs NVIDIA H100 80GB HBM3 on h100-1: any memory; isolated; tier 1"


@pytest.mark.parametrize(
    ("cls", "size", "fitting_free", "free", "in_fleet", "text"),
    [
        pytest.param(S, Size(14 * GIB), {}, {"share": 3}, {"mig": 4, "gpu": 2},
                     "serving: no isolated option with >= 14 GiB free; 3 shares free", id="the-issue's-example"),
        pytest.param(S, Size(14 * GIB), {}, {"mig": 5}, {"mig": 4},
                     "serving: no isolated option with >= 14 GiB free; 5 MIG instances too small", id="migs-too-small"),
        pytest.param(S, Size(100 * GIB), {}, {"gpu": 1}, {},
                     "serving: no isolated option with >= 100 GiB in the fleet; 1 whole GPU too small",
                     id="nothing-in-the-fleet-holds-it"),
        pytest.param(E, Size(10 * GIB), {"mig": 1}, {"mig": 1}, {"mig": 1, "share": 2},
                     "exploratory: 1 MIG instance with >= 10 GiB free, none placeable now",
                     id="free-but-not-placeable"),
        pytest.param(T, Size(None, 8), {}, {"mig": 7, "share": 2}, {"gpu": 16},
                     "training: no isolated option free; 2 shares, 7 MIG instances free", id="training-any-memory"),
    ],
)
def test_a_wait_says_why_no_tier_fits(cls: WorkloadClass, size: Size, fitting_free: dict[str, int],
                                      free: dict[str, int], in_fleet: dict[str, int], text: str) -> None:
    rule = DEFAULT_CLASS_POLICY.rule(cls)
    assert wait_text(cls, rule, size, fitting_free, free, in_fleet) == text


def test_free_counts_read_the_nodes_free_state() -> None:
    from nomad_gpu.domain.classes import fleet_facts
    from nomad_gpu.domain.classexplain import free_counts
    from nomad_gpu.domain.freeindex import NodeFree
    from nomad_gpu.domain.ids import InstanceId, NodeId
    from nomad_gpu.domain.inventory import Inventory
    from nomad_gpu.domain.placement import AllocPlacement

    from .builders import L40S, make_node, mig_slices, plugin_shared_gpus, whole_gpus

    whole = make_node("w", gpus=whole_gpus("w", 2, memory_mib=81920))
    migs = make_node("m", migs=mig_slices("m", "3g.40gb", 1) + mig_slices("m", "1g.10gb", 2))
    shared = make_node("s", gpus=plugin_shared_gpus("s", 1, 4, L40S))
    busy = AllocPlacement("g", 0, NodeId("w"), 0, 0, (InstanceId("GPU-w-0"),), "x", gpu_equivalents=1.0)
    half = AllocPlacement("g", 0, NodeId("s"), 0, 0, (InstanceId("GPU-s-s0-share-0"), InstanceId("GPU-s-s0-share-1")),
                          L40S, share_milli=500, gpu_equivalents=0.5, share_gpu=InstanceId("GPU-s-s0"))
    nodes = [NodeFree.of(whole, [busy]), NodeFree.of(migs, []), NodeFree.of(shared, [half])]
    facts = fleet_facts(Inventory.of([whole, migs, shared]))
    counts = free_counts(nodes, Size(14 * GIB), facts)
    # the builders' 1g.10gb reports 10 GiB, the 3g.40gb 40, the shared GPU 80: 14 GiB takes 1 of its 4 slots
    assert counts.free == {"gpu": 1, "mig": 3, "share": 2}
    assert counts.fitting_free == {"gpu": 1, "mig": 1, "share": 2}
    assert counts.in_fleet == {"gpu": 1, "mig": 1, "share": 1}
    big = free_counts(nodes, Size(60 * GIB), facts)
    assert big.fitting_free == {"gpu": 1} and big.in_fleet == {"gpu": 1, "share": 1}  # 60 GiB needs 3 slots


def test_a_share_of_the_whole_gpu_is_said_to_be_the_whole_shared_gpu_and_isolated() -> None:
    """Every slot of a shared GPU: no co-tenant can join, so "time-shared" would mislead."""
    whole = Choice(T, Size(), "share", device_text("share", "NVIDIA L40S", milli=1000), "l40s-1", 2, whole_share=True)
    assert whole.text() == "training -> all of shared NVIDIA L40S on l40s-1: any memory; isolated; tier 2"
