"""The ledger: reservation states, conflicts it must refuse, and capacity that comes back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nomad_gpu.domain.errors import LedgerConflict, UnknownEntry
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import GpuMode, NodeStatus
from nomad_gpu.domain.ledger import TRANSITIONS, Ledger, ReservationState, instance_owner
from nomad_gpu.domain.placement import AllocPlacement

from .builders import A100, H100, ledger_of, make_node, mig_slices, shared_gpus, whole_gpus

N1, N2 = NodeId("n1"), NodeId("n2")
MIG3 = f"{H100} MIG 3g.40gb"


def cluster() -> Ledger:
    n1 = make_node("n1", gpus=whole_gpus("n1", 4) + shared_gpus("n1", 1, slots=3)
                   + shared_gpus("n1", 1, mode=GpuMode.FLEX, start=1),
                   migs=mig_slices("n1", "3g.40gb", 2), cpu=10_000, mem=10_000)
    n2 = make_node("n2", gpus=whole_gpus("n2", 2), cpu=10_000, mem=10_000)
    return ledger_of(n1, n2)


def gpus(*ids: str, node: NodeId = N1, cpu: int = 0, mem: int = 0, group: str = "g") -> AllocPlacement:
    return AllocPlacement(group, 0, node, cpu, mem, tuple(InstanceId(i) for i in ids), A100,
                          gpu_equivalents=float(len(ids)))


def migp(*ids: str, node: NodeId = N1) -> AllocPlacement:
    return AllocPlacement("g", 0, node, 0, 0, tuple(InstanceId(i) for i in ids), MIG3,
                          gpu_equivalents=3 / 7 * len(ids))


def sharep(gid: str, milli: int, node: NodeId = N1) -> AllocPlacement:
    return AllocPlacement("g", 0, node, 0, 0, (InstanceId(gid),), A100, share_milli=milli,
                          gpu_equivalents=milli / 1000)


def snapshot(ledger: Ledger, node: NodeId) -> tuple[object, ...]:
    nf = ledger.node_free(node)
    assert nf is not None
    return (nf.cpu_free, nf.mem_free, dict(nf.gpu_free), {k: v for k, v in nf.tenants.items() if v},
            {k: list(v) for k, v in nf.mig_free.items()})


# ---- states ------------------------------------------------------------------------------------

def test_reserve_confirm_release_walks_the_transition_table() -> None:
    ledger = cluster()
    res = ledger.reserve(EntryId("e"), Team("t"), [gpus("GPU-n1-0")])
    assert res.state is ReservationState.RESERVED
    assert ledger.get(EntryId("e")).state is ReservationState.RESERVED
    assert ledger.confirm(EntryId("e")).state is ReservationState.CONFIRMED
    assert ledger.confirm(EntryId("e")).state is ReservationState.CONFIRMED  # a repeated event is harmless
    released = ledger.release(EntryId("e"))
    assert released is not None and released.state is ReservationState.RELEASED
    assert EntryId("e") not in ledger


def test_release_straight_from_reserved() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("e"), Team("t"), [gpus("GPU-n1-0")])
    released = ledger.release(EntryId("e"))
    assert released is not None and released.state is ReservationState.RELEASED


def test_double_release_is_a_no_op() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("e"), Team("t"), [gpus("GPU-n1-0", cpu=100)])
    ledger.reserve(EntryId("other"), Team("t"), [gpus("GPU-n1-1", cpu=100)])
    assert ledger.release(EntryId("e")) is not None
    before = snapshot(ledger, N1)
    assert ledger.release(EntryId("e")) is None
    assert ledger.release(EntryId("never")) is None
    assert snapshot(ledger, N1) == before
    assert EntryId("other") in ledger
    assert ledger.team_usage() == {Team("t"): 1.0}


def test_unknown_entries_raise_unknown_entry() -> None:
    ledger = cluster()
    with pytest.raises(UnknownEntry):
        ledger.get(EntryId("nope"))
    with pytest.raises(UnknownEntry):
        ledger.confirm(EntryId("nope"))
    ledger.reserve(EntryId("e"), Team("t"), [gpus("GPU-n1-0")])
    ledger.release(EntryId("e"))
    with pytest.raises(UnknownEntry):
        ledger.confirm(EntryId("e"))


@pytest.mark.parametrize(
    ("src", "dst", "allowed"),
    [
        pytest.param(ReservationState.RESERVED, ReservationState.CONFIRMED, True, id="reserved->confirmed"),
        pytest.param(ReservationState.RESERVED, ReservationState.RELEASED, True, id="reserved->released"),
        pytest.param(ReservationState.CONFIRMED, ReservationState.RELEASED, True, id="confirmed->released"),
        pytest.param(ReservationState.CONFIRMED, ReservationState.RESERVED, False, id="confirmed->reserved"),
        pytest.param(ReservationState.RELEASED, ReservationState.RESERVED, False, id="released->reserved"),
        pytest.param(ReservationState.RELEASED, ReservationState.CONFIRMED, False, id="released->confirmed"),
    ],
)
def test_transition_table(src: ReservationState, dst: ReservationState, allowed: bool) -> None:
    assert (dst in TRANSITIONS[src]) is allowed
    assert src.is_terminal() is (src is ReservationState.RELEASED)


# ---- conflicts ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param([gpus("GPU-n1-0")], [gpus("GPU-n1-0")], id="same-whole-gpu"),
        pytest.param([gpus("GPU-n1-0", "GPU-n1-1")], [gpus("GPU-n1-1", "GPU-n1-2")], id="overlapping-gpus"),
        pytest.param([], [gpus("GPU-n1-0", "GPU-n1-0")], id="one-gpu-twice-in-a-placement"),
        pytest.param([], [gpus("GPU-n1-0", group="a"), gpus("GPU-n1-0", group="b")], id="two-groups-one-gpu"),
        pytest.param([migp("MIG-n1-3g-0")], [migp("MIG-n1-3g-0")], id="same-mig-instance"),
        pytest.param([], [migp("MIG-n1-3g-0", "MIG-n1-3g-0")], id="one-mig-twice-in-a-placement"),
        pytest.param([], [migp("MIG-n1-3g-9")], id="unknown-mig-instance"),
        pytest.param([], [gpus("GPU-n1-9")], id="unknown-gpu"),
        pytest.param([sharep("GPU-n1-s0", 600)], [sharep("GPU-n1-s0", 500)], id="shares-over-1000-milli"),
        pytest.param([], [gpus("GPU-n1-s0")], id="whole-on-a-shared-gpu"),
        pytest.param([], [sharep("GPU-n1-0", 100)], id="share-on-a-whole-gpu"),
        pytest.param([sharep("GPU-n1-s1", 100)], [gpus("GPU-n1-s1")], id="whole-on-a-flex-gpu-with-a-share"),
        pytest.param([gpus("GPU-n1-s1")], [sharep("GPU-n1-s1", 100)], id="share-on-a-flex-gpu-taken-whole"),
        pytest.param([gpus("GPU-n1-0", cpu=6_000)], [gpus("GPU-n1-1", cpu=5_000)], id="cpu-over-capacity"),
        pytest.param([gpus("GPU-n1-0", mem=9_000)], [gpus("GPU-n1-1", mem=1_001)], id="memory-over-capacity"),
        pytest.param([], [gpus("GPU-x-0", node=NodeId("x"))], id="unknown-node"),
    ],
)
def test_double_commit_raises_and_commits_nothing(first: list[AllocPlacement], second: list[AllocPlacement]) -> None:
    ledger = cluster()
    if first:
        ledger.reserve(EntryId("first"), Team("t"), first)
    before = {n: snapshot(ledger, n) for n in (N1, N2)}
    usage = dict(ledger.team_usage())
    with pytest.raises(LedgerConflict):
        ledger.reserve(EntryId("second"), Team("u"), second)
    assert EntryId("second") not in ledger
    assert {n: snapshot(ledger, n) for n in (N1, N2)} == before
    assert dict(ledger.team_usage()) == usage


def test_max_tenants_is_a_hard_limit() -> None:
    ledger = cluster()  # GPU-n1-s0 has 3 slots
    for k in range(3):
        ledger.reserve(EntryId(f"s{k}"), Team("t"), [sharep("GPU-n1-s0", 100)])
    with pytest.raises(LedgerConflict, match="tenants"):
        ledger.reserve(EntryId("s3"), Team("t"), [sharep("GPU-n1-s0", 100)])
    ledger.release(EntryId("s1"))
    ledger.reserve(EntryId("s3"), Team("t"), [sharep("GPU-n1-s0", 100)])


def test_shares_fill_a_gpu_to_exactly_1000_milli() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("a"), Team("t"), [sharep("GPU-n1-s1", 600)])
    ledger.reserve(EntryId("b"), Team("t"), [sharep("GPU-n1-s1", 400)])
    nf = ledger.node_free(N1)
    assert nf is not None and nf.gpu_free[InstanceId("GPU-n1-s1")] == 0
    with pytest.raises(LedgerConflict):
        ledger.reserve(EntryId("c"), Team("t"), [sharep("GPU-n1-s1", 1)])


def test_same_entry_cannot_reserve_twice() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("e"), Team("t"), [gpus("GPU-n1-0")])
    with pytest.raises(LedgerConflict, match="already holds"):
        ledger.reserve(EntryId("e"), Team("t"), [gpus("GPU-n1-1")])
    assert ledger.get(EntryId("e")).placements == (gpus("GPU-n1-0"),)


def test_gang_is_all_or_nothing_across_nodes() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("x"), Team("t"), [gpus("GPU-n2-1", node=N2)])
    before = {n: snapshot(ledger, n) for n in (N1, N2)}
    with pytest.raises(LedgerConflict):
        ledger.reserve(EntryId("g"), Team("t"), [gpus("GPU-n1-0"), gpus("GPU-n2-0", "GPU-n2-1", node=N2)])
    assert {n: snapshot(ledger, n) for n in (N1, N2)} == before
    assert ledger.entries_on(N1) == frozenset()


# ---- accounting --------------------------------------------------------------------------------

def test_team_usage_counts_gpu_equivalents() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("w"), Team("t"), [gpus("GPU-n1-0", "GPU-n1-1")])
    ledger.reserve(EntryId("m"), Team("t"), [migp("MIG-n1-3g-0")])
    ledger.reserve(EntryId("s"), Team("u"), [sharep("GPU-n1-s0", 250)])
    assert ledger.team_usage()[Team("t")] == pytest.approx(2 + 3 / 7)
    assert ledger.team_usage()[Team("u")] == pytest.approx(0.25)
    ledger.release(EntryId("w"))
    ledger.release(EntryId("m"))
    assert Team("t") not in ledger.team_usage()
    assert ledger.get(EntryId("s")).gpu_equivalents == pytest.approx(0.25)


def test_entries_on_and_instance_owner() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("a"), Team("t"), [gpus("GPU-n1-0"), gpus("GPU-n2-0", node=N2)])
    ledger.reserve(EntryId("b"), Team("t"), [migp("MIG-n1-3g-1")])
    assert ledger.entries_on(N1) == {EntryId("a"), EntryId("b")}
    assert ledger.entries_on(N2) == {EntryId("a")}
    assert instance_owner(ledger) == {InstanceId("GPU-n1-0"): "a", InstanceId("GPU-n2-0"): "a",
                                      InstanceId("MIG-n1-3g-1"): "b"}
    ledger.release(EntryId("a"))
    assert ledger.entries_on(N2) == frozenset()


def test_released_capacity_is_reusable_and_equals_a_fresh_index() -> None:
    ledger = cluster()
    fresh = cluster()
    ledger.reserve(EntryId("a"), Team("t"), [gpus("GPU-n1-0", "GPU-n1-1", cpu=3_000, mem=2_000)])
    ledger.reserve(EntryId("b"), Team("t"), [migp("MIG-n1-3g-0", "MIG-n1-3g-1"), sharep("GPU-n1-s0", 700)])
    ledger.reserve(EntryId("c"), Team("t"), [sharep("GPU-n1-s1", 300), gpus("GPU-n2-0", node=N2, cpu=10_000)])
    for e in ("b", "a", "c"):
        ledger.release(EntryId(e))
    for n in (N1, N2):
        assert snapshot(ledger, n) == snapshot(fresh, n)
    # and the very same instances can be committed again
    ledger.reserve(EntryId("a2"), Team("t"), [gpus("GPU-n1-0", "GPU-n1-1", cpu=10_000, mem=10_000)])
    ledger.reserve(EntryId("b2"), Team("t"), [migp("MIG-n1-3g-0", "MIG-n1-3g-1"), sharep("GPU-n1-s0", 1000)])


# ---- node changes ------------------------------------------------------------------------------

def test_unhealthy_gpu_offers_nothing_and_a_held_one_stays_held() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("a"), Team("t"), [gpus("GPU-n1-0")])
    node = ledger.inventory.nodes[N1]
    sick = replace(node, gpus=tuple(replace(g, healthy=g.id not in {"GPU-n1-0", "GPU-n1-1"}) for g in node.gpus))
    ledger.set_node(sick)
    nf = ledger.node_free(N1)
    assert nf is not None
    offered = {i for ids in nf.whole_free().values() for i in ids}
    assert offered == {InstanceId("GPU-n1-2"), InstanceId("GPU-n1-3"), InstanceId("GPU-n1-s1")}  # s1 is flex
    assert EntryId("a") in ledger
    with pytest.raises(LedgerConflict):
        ledger.reserve(EntryId("b"), Team("t"), [gpus("GPU-n1-1")])
    ledger.set_node(node)  # healthy again: the held GPU must still be held
    with pytest.raises(LedgerConflict):
        ledger.reserve(EntryId("b"), Team("t"), [gpus("GPU-n1-0")])
    ledger.reserve(EntryId("b"), Team("t"), [gpus("GPU-n1-1")])
    ledger.release(EntryId("a"))
    ledger.reserve(EntryId("c"), Team("t"), [gpus("GPU-n1-0")])


def test_unhealthy_mig_and_shared_gpu_offer_nothing() -> None:
    ledger = cluster()
    node = ledger.inventory.nodes[N1]
    sick = replace(node, migs=tuple(replace(m, healthy=False) for m in node.migs),
                   gpus=tuple(replace(g, healthy=g.mode is GpuMode.WHOLE) for g in node.gpus))
    ledger.set_node(sick)
    nf = ledger.node_free(N1)
    assert nf is not None
    assert not any(nf.mig_free.values())
    assert nf.share_free() == {}
    assert {k for k, _, _ in nf.keys()} == {"whole"}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"status": NodeStatus.DOWN}, id="down"),
        pytest.param({"status": NodeStatus.DISCONNECTED}, id="disconnected"),
        pytest.param({"status": NodeStatus.INITIALIZING}, id="initializing"),
        pytest.param({"eligible": False}, id="ineligible"),
        pytest.param({"draining": True}, id="draining"),
    ],
)
def test_unschedulable_node_offers_nothing_but_keeps_its_books(change: dict[str, object]) -> None:
    ledger = cluster()
    ledger.reserve(EntryId("a"), Team("t"), [gpus("GPU-n1-0", cpu=1_000)])
    node = ledger.inventory.nodes[N1]
    ledger.set_node(replace(node, **change))  # type: ignore[arg-type]
    nf = ledger.node_free(N1)
    assert nf is not None and not nf.offered and nf.keys() == [] and nf.static_keys() == []
    assert ledger.index.total("whole", A100) == 2  # only n2's GPUs
    assert EntryId("a") in ledger
    ledger.set_node(node)
    # n1: 4 whole + 1 flex GPU, one of them held; n2: 2 whole
    assert ledger.index.total("whole", A100) == 4 + 2
    assert ledger.release(EntryId("a")) is not None
    assert ledger.index.total("whole", A100) == 5 + 2


def test_removed_node_drops_out_and_release_still_works() -> None:
    ledger = cluster()
    ledger.reserve(EntryId("a"), Team("t"), [gpus("GPU-n2-0", node=N2)])
    ledger.remove_node(N2)
    assert ledger.node_free(N2) is None
    assert ledger.release(EntryId("a")) is not None
    assert ledger.node_free(N2) is None
    with pytest.raises(LedgerConflict):
        ledger.reserve(EntryId("b"), Team("t"), [gpus("GPU-n2-0", node=N2)])


def test_node_free_of_is_lenient_about_vanished_devices() -> None:
    node = make_node("n1", gpus=whole_gpus("n1", 1), cpu=100, mem=100)
    held = [gpus("GPU-n1-0", cpu=50), gpus("GPU-n1-7", cpu=80), migp("MIG-gone")]
    nf = NodeFree.of(node, held)
    assert nf.cpu_free == 0 and nf.gpu_free[InstanceId("GPU-n1-0")] == 0
