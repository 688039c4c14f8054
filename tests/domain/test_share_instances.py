"""The share contract in the core: a share of M milli on a GPU of N slots takes ceil(M / (1000/N)) of
its share instances, all of one GPU, and no instance is ever handed out twice."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.errors import LedgerConflict
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.placement import AllocPlacement

from .builders import (
    admitted,
    cycle,
    job,
    ledger_of,
    make_node,
    plugin_shared_gpus,
    share,
    waiting,
    whole,
    whole_gpus,
)

POLICIES = ["first-fit", "best-fit", "frag-aware", "fgd", "random"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("slots", "milli", "instances"),
                         [(4, 500, 2), (4, 250, 1), (4, 300, 2), (4, 999, 4), (3, 334, 2), (3, 333, 1), (8, 1, 1)])
def test_a_share_takes_ceil_milli_over_slot_instances(policy: str, slots: int, milli: int, instances: int) -> None:
    ledger = ledger_of(make_node("n0", gpus=plugin_shared_gpus("n0", 1, slots)))
    (p,) = admitted(cycle(ledger, [job("s", share(milli))], policy=policy), "s").placements
    assert p.share_gpu == "GPU-n0-s0" and p.shared_gpu == "GPU-n0-s0"
    assert p.share_milli == milli and p.device_name == "NVIDIA A100-SXM4-80GB"
    assert len(p.instance_ids) == instances
    assert all(i.startswith("GPU-n0-s0-share-") for i in p.instance_ids)


@pytest.mark.parametrize("policy", POLICIES)
def test_two_half_shares_split_one_gpu_of_four_slots_and_a_third_waits(policy: str) -> None:
    ledger = ledger_of(make_node("n0", gpus=plugin_shared_gpus("n0", 1, 4)))
    result = cycle(ledger, [job(f"s{k}", share(500), at=k) for k in range(3)], policy=policy)
    a, b = (admitted(result, e).placements[0] for e in ("s0", "s1"))
    assert set(a.instance_ids).isdisjoint(b.instance_ids)
    assert set(a.instance_ids) | set(b.instance_ids) == {f"GPU-n0-s0-share-{k}" for k in range(4)}
    waiting(result, "s2")
    nf = ledger.node_free(NodeId("n0"))
    assert nf is not None and nf.gpu_free[InstanceId("GPU-n0-s0")] == 0 and nf.slot_free[InstanceId("GPU-n0-s0")] == []


def test_a_rounded_up_share_leaves_only_whole_slots_free() -> None:
    """300 milli of 4 slots holds 2 instances (500 milli worth): a later 600 no longer fits, a 500 does."""
    ledger = ledger_of(make_node("n0", gpus=plugin_shared_gpus("n0", 1, 4)))
    admitted(cycle(ledger, [job("a", share(300))]), "a")
    nf = ledger.node_free(NodeId("n0"))
    assert nf is not None and nf.gpu_free[InstanceId("GPU-n0-s0")] == 500
    waiting(cycle(ledger, [job("b", share(600))]), "b")
    admitted(cycle(ledger, [job("c", share(500))]), "c")


def test_released_instances_are_handed_out_again() -> None:
    ledger = ledger_of(make_node("n0", gpus=plugin_shared_gpus("n0", 1, 2)))
    first = admitted(cycle(ledger, [job("a", share(1000 // 2 + 1))]), "a").placements[0]
    assert len(first.instance_ids) == 2
    waiting(cycle(ledger, [job("b", share(1))]), "b")
    ledger.release(EntryId("a"))
    again = admitted(cycle(ledger, [job("c", share(500))]), "c").placements[0]
    assert len(again.instance_ids) == 1


def test_a_whole_gpu_job_never_lands_on_a_gpu_with_share_instances() -> None:
    ledger = ledger_of(make_node("n0", gpus=plugin_shared_gpus("n0", 2, 4)))
    waiting(cycle(ledger, [job("w", whole(1))]), "w")
    ledger = ledger_of(make_node("n0", gpus=whole_gpus("n0", 1) + plugin_shared_gpus("n0", 1, 4)))
    (p,) = admitted(cycle(ledger, [job("w", whole(1))]), "w").placements
    assert p.instance_ids == ("GPU-n0-0",)


def _pin(entry: str, ids: tuple[str, ...], milli: int, gpu: str = "GPU-n0-s0") -> tuple[EntryId, Team,
                                                                                         list[AllocPlacement]]:
    return EntryId(entry), Team("t"), [AllocPlacement("g", 0, NodeId("n0"), 0, 0, tuple(InstanceId(i) for i in ids),
                                                      "NVIDIA A100-SXM4-80GB", milli, milli / 1000,
                                                      share_gpu=InstanceId(gpu))]


def test_the_ledger_refuses_a_share_instance_twice_too_few_or_of_another_gpu() -> None:
    ledger = ledger_of(make_node("n0", gpus=plugin_shared_gpus("n0", 2, 4)))
    ledger.reserve(*_pin("a", ("GPU-n0-s0-share-0",), 250))
    with pytest.raises(LedgerConflict, match="not free"):
        ledger.reserve(*_pin("b", ("GPU-n0-s0-share-0",), 250))
    with pytest.raises(LedgerConflict, match="needs 2 share instances"):
        ledger.reserve(*_pin("c", ("GPU-n0-s0-share-1",), 500))
    with pytest.raises(LedgerConflict, match="not all of"):
        ledger.reserve(*_pin("d", ("GPU-n0-s0-share-1", "GPU-n0-s1-share-0"), 500))
    assert "b" not in ledger and "c" not in ledger and "d" not in ledger
    ledger.reserve(*_pin("e", ("GPU-n0-s0-share-1", "GPU-n0-s0-share-2"), 500))


def test_a_foreign_allocation_on_share_instances_is_booked_like_any_device() -> None:
    """A plain Nomad job that asks the plugin's share group directly holds those instances."""
    ledger = ledger_of(make_node("n0", gpus=plugin_shared_gpus("n0", 1, 4)))
    ledger.reserve(EntryId("nomad:x"), Team("foreign"),
                   [AllocPlacement("g", 0, NodeId("n0"), 0, 0, (InstanceId("GPU-n0-s0-share-0"),
                                                                InstanceId("GPU-n0-s0-share-1")), "shared")])
    (p,) = admitted(cycle(ledger, [job("s", share(500))]), "s").placements
    assert set(p.instance_ids) == {"GPU-n0-s0-share-2", "GPU-n0-s0-share-3"}
    waiting(cycle(ledger, [job("t", share(250))]), "t")
