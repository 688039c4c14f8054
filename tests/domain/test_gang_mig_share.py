"""Gang admission (all groups or none, never one GPU twice) and MIG / time-slice share placement."""

from __future__ import annotations

from collections import Counter

import pytest

from nomad_gpu.domain.cycle import Admit
from nomad_gpu.domain.ids import EntryId, InstanceId
from nomad_gpu.domain.inventory import GpuMode, Node
from nomad_gpu.domain.placement import WaitReason
from nomad_gpu.domain.requests import GpuAsk

from .builders import (
    A100,
    H100,
    L40S,
    admitted,
    ask,
    cycle,
    gang,
    gpu_node,
    job,
    ledger_of,
    make_node,
    mig,
    mig_slices,
    nodes_of,
    occupy,
    share,
    shared_gpus,
    waiting,
    whole,
    whole_gpus,
)

POLICIES = ["first-fit", "best-fit", "frag-aware"]


def all_ids(d: Admit) -> list[InstanceId]:
    return [i for p in d.placements for i in p.instance_ids]


# ---- gangs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_two_groups_on_one_node_get_disjoint_gpus(policy: str) -> None:
    ledger = ledger_of(gpu_node("n0"))
    d = admitted(cycle(ledger, [gang("g", ask("a", whole(4)), ask("b", whole(4)))], policy=policy), "g")
    ids = all_ids(d)
    assert len(ids) == 8 and len(set(ids)) == 8


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("one_node", [False, True], ids=["spread", "one-node"])
def test_two_groups_never_share_a_gpu(policy: str, one_node: bool) -> None:
    ledger = ledger_of(gpu_node("n0"))
    result = cycle(ledger, [gang("g", ask("a", whole(5)), ask("b", whole(5)), one_node=one_node)], policy=policy)
    assert waiting(result, "g").reason in {WaitReason.INSUFFICIENT, WaitReason.FRAGMENTED, WaitReason.GANG}
    assert EntryId("g") not in ledger


@pytest.mark.parametrize("policy", POLICIES)
def test_gang_is_all_or_none(policy: str) -> None:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1", model=H100, n=2))
    before = [nf.gpu_free.copy() for nf in ledger.index.nodes()]
    result = cycle(ledger, [gang("g", ask("a", whole(8, A100)), ask("b", whole(3, H100)))], policy=policy)
    w = waiting(result, "g")
    assert "group 'b'" in w.detail
    assert EntryId("g") not in ledger
    assert [nf.gpu_free for nf in ledger.index.nodes()] == before


@pytest.mark.parametrize("policy", POLICIES)
def test_gang_spans_nodes_when_it_must(policy: str) -> None:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1"))
    d = admitted(cycle(ledger, [gang("g", ask("a", whole(8)), ask("b", whole(8)))], policy=policy), "g")
    assert len(nodes_of(d)) == 2 and len(set(all_ids(d))) == 16


@pytest.mark.parametrize("policy", POLICIES)
def test_one_node_gang_stays_on_one_node(policy: str) -> None:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1"))
    occupy(ledger, "busy", "n0", 5)
    queued = gang("g", ask("a", whole(2)), ask("b", whole(2), cpu=1_000), ask("c", None, cpu=500), one_node=True)
    d = admitted(cycle(ledger, [queued], policy=policy), "g")
    assert len(nodes_of(d)) == 1 and len(set(all_ids(d))) == 4
    assert [p.group for p in d.placements] == ["a", "b", "c"]


@pytest.mark.parametrize("policy", POLICIES)
def test_gang_shares_and_migs_do_not_double_count(policy: str) -> None:
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 1), migs=mig_slices("n0", "3g.40gb", 1)))
    result = cycle(ledger, [gang("s", ask("a", share(600)), ask("b", share(600))),
                            gang("m", ask("a", mig("3g.40gb")), ask("b", mig("3g.40gb")), at=1)], policy=policy)
    assert waiting(result, "s").reason is not None and waiting(result, "m").reason is not None
    assert not list(ledger.reservations())


def test_groups_with_count_become_indexed_asks() -> None:
    ledger = ledger_of(gpu_node("n0"))
    queued = gang("g", ask("w", whole(2), index=0), ask("w", whole(2), index=1), ask("w", whole(2), index=2))
    d = admitted(cycle(ledger, [queued]), "g")
    assert [(p.group, p.index) for p in d.placements] == [("w", 0), ("w", 1), ("w", 2)]
    assert len(set(all_ids(d))) == 6


# ---- MIG ---------------------------------------------------------------------------------------

def mig_node() -> list[Node]:
    return [make_node("n0", gpus=whole_gpus("n0", 2, H100),
                      migs=mig_slices("n0", "3g.40gb", 2) + mig_slices("n0", "1g.10gb", 4, unhealthy=[1]))]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    ("gpu", "expected_name", "count"),
    [
        pytest.param(mig("3g.40gb"), f"{H100} MIG 3g.40gb", 1, id="3g"),
        pytest.param(mig("1g.10gb", 3), f"{H100} MIG 1g.10gb", 3, id="3x1g"),
        pytest.param(mig("3g.40gb", 1, H100), f"{H100} MIG 3g.40gb", 1, id="model-pinned"),
    ],
)
def test_mig_placement(policy: str, gpu: GpuAsk, expected_name: str, count: int) -> None:
    ledger = ledger_of(*mig_node())
    d = admitted(cycle(ledger, [job("j", gpu)], policy=policy), "j")
    (p,) = d.placements
    assert p.device_name == expected_name
    assert len(p.instance_ids) == count and all(i.startswith("MIG-") for i in p.instance_ids)
    assert "MIG-n0-1g-1" not in p.instance_ids  # unhealthy
    assert p.gpu_equivalents == pytest.approx(count * int(expected_name[-7]) / 7)


@pytest.mark.parametrize("policy", POLICIES)
def test_mig_instances_are_handed_out_once(policy: str) -> None:
    ledger = ledger_of(*mig_node())
    queue = [job(f"j{k}", mig("1g.10gb"), at=k) for k in range(5)]
    result = cycle(ledger, queue, policy=policy)
    got = [i for d in result.admitted for i in all_ids(d)]
    assert sorted(got) == ["MIG-n0-1g-0", "MIG-n0-1g-2", "MIG-n0-1g-3"]
    assert waiting(result, "j3").reason is WaitReason.INSUFFICIENT


def test_mig_of_another_model_is_not_offered() -> None:
    ledger = ledger_of(*mig_node())
    w = waiting(cycle(ledger, [job("j", mig("3g.40gb", 1, A100))]), "j")
    assert w.reason is WaitReason.NO_SUCH_SHAPE


def test_whole_gpu_request_never_takes_a_mig_slice() -> None:
    ledger = ledger_of(*mig_node())
    result = cycle(ledger, [job(f"w{k}", whole(1), at=k) for k in range(3)])
    assert [i for d in result.admitted for i in all_ids(d)] == ["GPU-n0-0", "GPU-n0-1"]


# ---- shares ------------------------------------------------------------------------------------

def share_milli_per_gpu(results: list[Admit]) -> Counter[InstanceId]:
    out: Counter[InstanceId] = Counter()
    for d in results:
        for p in d.placements:
            if p.is_share:
                out[p.instance_ids[0]] += p.share_milli
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    ("millis", "n_admitted"),
    [
        pytest.param([400, 400, 400], 2, id="3x400-on-one-gpu"),
        pytest.param([500, 500], 2, id="exactly-1000"),
        pytest.param([1000, 1], 1, id="full-then-one"),
        pytest.param([333, 333, 333, 2], 3, id="thirds"),
        pytest.param([250] * 5, 4, id="quarters"),
    ],
)
def test_shares_on_one_gpu_never_exceed_1000_milli(policy: str, millis: list[int], n_admitted: int) -> None:
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 1)))
    result = cycle(ledger, [job(f"s{k}", share(m), at=k) for k, m in enumerate(millis)], policy=policy)
    assert len(result.admitted) == n_admitted
    assert max(share_milli_per_gpu(list(result.admitted)).values()) <= 1000
    for d in result.admitted:
        (p,) = d.placements
        assert p.instance_ids == ("GPU-n0-s0",) and p.gpu_equivalents == pytest.approx(p.share_milli / 1000)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("slots", [1, 2, 4])
def test_max_tenants_honoured(policy: str, slots: int) -> None:
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 2, slots=slots)))
    result = cycle(ledger, [job(f"s{k}", share(100), at=k) for k in range(10)], policy=policy)
    per_gpu = Counter(d.placements[0].instance_ids[0] for d in result.admitted)
    assert len(result.admitted) == 2 * slots
    assert set(per_gpu.values()) == {slots}


@pytest.mark.parametrize("policy", POLICIES)
def test_shares_and_whole_gpus_keep_to_their_own_gpus(policy: str) -> None:
    ledger = ledger_of(make_node("n0", gpus=whole_gpus("n0", 2) + shared_gpus("n0", 1)))
    result = cycle(ledger, [job("w", whole(3)), job("s", share(100), at=1), job("w2", whole(2), at=2)],
                   policy=policy)
    assert waiting(result, "w").reason is WaitReason.NO_SUCH_SHAPE
    assert all_ids(admitted(result, "s")) == ["GPU-n0-s0"]
    assert set(all_ids(admitted(result, "w2"))) == {"GPU-n0-0", "GPU-n0-1"}


@pytest.mark.parametrize("policy", POLICIES)
def test_flex_gpu_is_whole_or_shared_never_both(policy: str) -> None:
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 1, mode=GpuMode.FLEX)))
    result = cycle(ledger, [job("s", share(100)), job("w", whole(1), at=1)], policy=policy)
    admitted(result, "s")
    assert waiting(result, "w").reason is WaitReason.INSUFFICIENT
    ledger.release(EntryId("s"))
    result = cycle(ledger, [job("w", whole(1), at=1), job("s2", share(100), at=2)], policy=policy)
    admitted(result, "w")
    assert waiting(result, "s2").reason is WaitReason.INSUFFICIENT


@pytest.mark.parametrize("policy", POLICIES)
def test_share_model_restriction(policy: str) -> None:
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 1, A100) + shared_gpus("n0", 1, L40S, start=1)))
    d = admitted(cycle(ledger, [job("s", share(100, L40S))], policy=policy), "s")
    assert all_ids(d) == ["GPU-n0-s1"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("groups", [5, 8, 10])
def test_wide_gang_on_an_idle_cluster(policy: str, groups: int) -> None:
    """More groups than the fitter scores per shape class must still find the idle nodes."""
    ledger = ledger_of(*(gpu_node(f"n{k}") for k in range(10)))
    d = admitted(cycle(ledger, [gang("g", *(ask(f"a{k}", whole(8)) for k in range(groups)))], policy=policy), "g")
    assert len(nodes_of(d)) == groups and len(set(all_ids(d))) == 8 * groups


@pytest.mark.parametrize("policy", POLICIES)
def test_wide_gang_of_migs_and_shares(policy: str) -> None:
    ledger = ledger_of(*(make_node(f"n{k}", gpus=shared_gpus(f"n{k}", 1), migs=mig_slices(f"n{k}", "3g.40gb", 1))
                         for k in range(7)))
    result = cycle(ledger, [gang("m", *(ask(f"m{k}", mig("3g.40gb")) for k in range(7))),
                            gang("s", *(ask(f"s{k}", share(1000)) for k in range(7)), at=1)], policy=policy)
    assert len(set(all_ids(admitted(result, "m")))) == 7
    assert len(set(all_ids(admitted(result, "s")))) == 7
