"""Why is my job waiting? Each reason, from the decision itself (STYLE habit 4)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement, NoFit, WaitReason
from nomad_gpu.domain.requests import JobRequest

from .builders import (
    A100,
    H100,
    ask,
    config,
    cycle,
    gang,
    gpu_node,
    job,
    ledger_of,
    make_node,
    mig,
    mig_slices,
    occupy,
    share,
    shared_gpus,
    waiting,
    whole,
)


def four_a100_nodes() -> Ledger:
    return ledger_of(*(gpu_node(f"n{k}") for k in range(4)))


def fragmented() -> Ledger:
    """8 GPUs free in total, at most 3 on one node."""
    ledger = four_a100_nodes()
    for k, busy in enumerate([5, 6, 6, 7]):
        occupy(ledger, f"busy{k}", f"n{k}", busy)
    return ledger


def scarce() -> Ledger:
    """2 GPUs free in total."""
    ledger = four_a100_nodes()
    for k, busy in enumerate([7, 7, 8, 8]):
        occupy(ledger, f"busy{k}", f"n{k}", busy)
    return ledger


def cpu_starved() -> Ledger:
    """GPUs free everywhere, but only 1000 MHz and 500 MB beside them."""
    ledger = ledger_of(gpu_node("n0", cpu=10_000, mem=10_000), gpu_node("n1", cpu=10_000, mem=10_000))
    occupy(ledger, "b0", "n0", 1, cpu=9_000, mem=9_500)
    occupy(ledger, "b1", "n1", 1, cpu=9_000, mem=9_500)
    return ledger


def draining_h100() -> Ledger:
    return ledger_of(gpu_node("n0"), gpu_node("n1", model=H100, draining=True))


def hold(ledger: Ledger, entry: str, node: str, *ids: str, milli: int = 0) -> None:
    name = f"{H100} MIG 3g.40gb" if ids[0].startswith("MIG-") else A100
    ledger.reserve(EntryId(entry), Team("busy"), [AllocPlacement("g", 0, NodeId(node), 0, 0,
                                                                 tuple(InstanceId(i) for i in ids), name,
                                                                 share_milli=milli)])


def with_migs() -> Ledger:
    """3g.40gb: 2 instances free in total, at most 1 on one node; 1g.10gb: 1 instance."""
    ledger = ledger_of(make_node("n0", migs=mig_slices("n0", "3g.40gb", 2) + mig_slices("n0", "1g.10gb", 1)),
                       make_node("n1", migs=mig_slices("n1", "3g.40gb", 2)))
    hold(ledger, "m0", "n0", "MIG-n0-3g-0")
    hold(ledger, "m1", "n1", "MIG-n1-3g-1")
    return ledger


def with_shares() -> Ledger:
    """GPU s0: 200 milli free; GPU s1: 800 free but both of its 2 tenant slots taken."""
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 2, slots=2)))
    hold(ledger, "s0", "n0", "GPU-n0-s0", milli=800)
    hold(ledger, "s1", "n0", "GPU-n0-s1", milli=100)
    hold(ledger, "s2", "n0", "GPU-n0-s1", milli=100)
    return ledger


CASES = [
    pytest.param(four_a100_nodes, job("j", whole(16)), WaitReason.NO_SUCH_SHAPE, "no schedulable node has 16 x GPU",
                 id="bigger-than-any-node"),
    pytest.param(four_a100_nodes, job("j", whole(1, H100)), WaitReason.NO_SUCH_SHAPE, H100, id="model-not-here"),
    pytest.param(draining_h100, job("j", whole(1, H100)), WaitReason.NO_SUCH_SHAPE, "no schedulable node",
                 id="model-only-on-a-draining-node"),
    pytest.param(four_a100_nodes, job("j", mig("3g.40gb")), WaitReason.NO_SUCH_SHAPE, "MIG 3g.40gb",
                 id="no-mig-here"),
    pytest.param(with_migs, job("j", mig("3g.40gb", 3)), WaitReason.NO_SUCH_SHAPE, "3 x MIG 3g.40gb",
                 id="mig-count-bigger-than-any-node"),
    pytest.param(four_a100_nodes, job("j", share(100)), WaitReason.NO_SUCH_SHAPE, "shared GPU",
                 id="no-shared-gpu-here"),
    pytest.param(fragmented, job("j", whole(4)), WaitReason.FRAGMENTED,
                 "8 GPUs free in total, at most 3 on one node", id="fragmented"),
    pytest.param(fragmented, job("j", whole(8)), WaitReason.FRAGMENTED,
                 "8 GPUs free in total, at most 3 on one node; 8 needed", id="fragmented-exactly-enough"),
    pytest.param(scarce, job("j", whole(4)), WaitReason.INSUFFICIENT, "2 of 4 GPUs free", id="insufficient"),
    pytest.param(with_migs, job("j", mig("3g.40gb", 2)), WaitReason.FRAGMENTED,
                 "2 instances free in total, at most 1 on one node", id="mig-fragmented"),
    pytest.param(with_migs, job("j", mig("1g.10gb", 2)), WaitReason.NO_SUCH_SHAPE, "2 x MIG 1g.10gb",
                 id="mig-1g-count"),
    pytest.param(with_shares, job("j", share(300)), WaitReason.INSUFFICIENT, "300 milli-GPU",
                 id="share-insufficient"),
    pytest.param(cpu_starved, job("j", whole(1), cpu=2_000), WaitReason.CPU_MEMORY, "2000 MHz",
                 id="gpus-free-but-no-cpu"),
    pytest.param(cpu_starved, job("j", whole(1), mem=1_000), WaitReason.CPU_MEMORY, "1000 MB",
                 id="gpus-free-but-no-memory"),
    pytest.param(cpu_starved, job("j", None, cpu=20_000), WaitReason.CPU_MEMORY, "20000 MHz",
                 id="cpu-only-too-big"),
    pytest.param(four_a100_nodes, gang("j", ask("a", whole(8)), ask("b", whole(4)), one_node=True),
                 WaitReason.GANG, "no single node fits all 2 task groups", id="one-node-gang"),
]


@pytest.mark.parametrize(("build", "queued", "reason", "detail"), CASES)
def test_wait_reason(build: Callable[[], Ledger], queued: JobRequest, reason: WaitReason, detail: str) -> None:
    ledger = build()
    before = {e.entry for e in ledger.reservations()}
    for policy in ("first-fit", "best-fit", "frag-aware"):
        w = waiting(cycle(ledger, [queued], policy=policy), queued.entry)
        assert w.reason is reason, f"{policy}: {w}"
        assert detail in w.detail, f"{policy}: {w}"
        assert str(w).startswith(reason.value)
    assert {e.entry for e in ledger.reservations()} == before


def test_share_blocked_by_tenant_slots() -> None:
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 1, slots=2)))
    result = cycle(ledger, [job("a", share(100)), job("b", share(100), at=1), job("c", share(100), at=2)])
    assert [d.entry for d in result.admitted] == ["a", "b"]
    assert waiting(result, "c").reason is WaitReason.INSUFFICIENT


def test_gang_names_the_group_that_does_not_fit() -> None:
    ledger = four_a100_nodes()
    w = waiting(cycle(ledger, [gang("j", ask("small", whole(1)), ask("huge", whole(9)))]), "j")
    assert w.reason is WaitReason.NO_SUCH_SHAPE and "group 'huge'" in w.detail
    assert EntryId("j") not in ledger


def test_quota() -> None:
    ledger = four_a100_nodes()
    cfg = config(quotas={"a": 3.0})
    result = cycle(ledger, [job("j1", whole(2)), job("j2", whole(2), at=1)], cfg=cfg)
    w = waiting(result, "j2")
    assert w.reason is WaitReason.QUOTA
    assert w.detail == "team a holds 2 of 3 GPU; needs 2"


def test_reserved_for_an_older_job() -> None:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1"))
    occupy(ledger, "busy", "n1", 8)
    holds = {EntryId("old"): frozenset({NodeId("n0")})}
    old = job("old", whole(8, H100), at=0.0)  # never fits here; still holds n0 this cycle
    result = cycle(ledger, [old, job("j", whole(1), at=1.0)], now=10.0, holds=holds,
                   cfg=config(hol=1e9))
    w = waiting(result, "j")
    assert w.reason is WaitReason.RESERVED and "held for an older job" in w.detail
    assert "1 node(s)" in w.detail


def test_held_names_its_nodes() -> None:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1"))
    occupy(ledger, "b0", "n0", 3)
    occupy(ledger, "b1", "n1", 2)
    result = cycle(ledger, [job("big", whole(8), at=0.0)], now=1_000.0, cfg=config(hol=600.0))
    w = waiting(result, "big")
    assert w.reason is WaitReason.HELD
    (nodes,) = result.holds.values()
    assert f"holding node(s) {', '.join(sorted(nodes))}" in w.detail
    assert "at most 6 on one node" in w.detail


def test_reasons_are_ranked_in_the_enum() -> None:
    assert list(WaitReason)[:4] == [WaitReason.NO_SUCH_SHAPE, WaitReason.FRAGMENTED, WaitReason.INSUFFICIENT,
                                    WaitReason.CPU_MEMORY]
    assert str(NoFit(WaitReason.QUOTA, "")) == WaitReason.QUOTA.value


def two_datacenters() -> Ledger:
    """dc1 (pool default) is empty; dc2 (pool gpu) is full."""
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1", datacenter="dc2", node_pool="gpu"))
    occupy(ledger, "busy", "n1", 8)
    return ledger


@pytest.mark.parametrize(
    ("queued", "limit"),
    [
        pytest.param(job("j", whole(1), datacenters=["dc2"]), "outside its datacenters", id="datacenter"),
        pytest.param(job("j", whole(1), node_pool="gpu"), "node pool", id="node-pool"),
        pytest.param(job("j", whole(1, min_memory_mib=100_000)), "100000 MiB per GPU", id="gpu-memory"),
        pytest.param(job("j", share(100), datacenters=["dc2"]), "outside its datacenters", id="share-datacenter"),
    ],
)
def test_free_capacity_the_job_may_not_use_is_not_called_fragmentation(queued: JobRequest, limit: str) -> None:
    """8 GPUs free on one node is never 'fragmented'; the job's own limits keep it out of reach."""
    ledger = two_datacenters()
    if queued.asks[0].gpu == share(100):
        ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 1)),
                           make_node("n1", gpus=shared_gpus("n1", 1), datacenter="dc2"))
        hold(ledger, "busy", "n1", "GPU-n1-s0", milli=1000)
    for policy in ("first-fit", "best-fit", "frag-aware"):
        w = waiting(cycle(ledger, [queued], policy=policy), "j")
        assert w.reason is WaitReason.INSUFFICIENT, f"{policy}: {w}"
        assert limit in w.detail, f"{policy}: {w}"
