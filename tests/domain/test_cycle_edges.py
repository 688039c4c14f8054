"""Cycle edge cases: repeated entries, one-node gang holds, and O(1) node updates in the ledger."""

from __future__ import annotations

from nomad_gpu.domain.cycle import Admit
from nomad_gpu.domain.ids import EntryId, NodeId

from .builders import ask, config, cycle, gang, gpu_node, job, ledger_of, occupy, waiting, whole


def test_an_entry_listed_twice_or_already_holding_capacity_is_not_decided_again() -> None:
    ledger = ledger_of(gpu_node("n1", 8))
    first = cycle(ledger, [job("a", whole(1)), job("a", whole(1))])
    assert [d.entry for d in first.decisions] == ["a"]
    again = cycle(ledger, [job("a", whole(1)), job("b", whole(1))])
    assert [d.entry for d in again.decisions] == ["b"]
    assert isinstance(again.decisions[0], Admit)


def test_a_one_node_gang_holds_one_node_that_fits_all_of_it() -> None:
    ledger = ledger_of(gpu_node("n1", 8), gpu_node("n2", 8))
    occupy(ledger, "busy1", "n1", 6)
    occupy(ledger, "busy2", "n2", 6)
    big = gang("big", ask("a", whole(4)), ask("b", whole(4)), one_node=True, at=0.0)
    result = cycle(ledger, [big], now=10_000.0, cfg=config(hol=60.0))
    waiting(result, "big")
    assert len(result.holds[EntryId("big")]) == 1  # not one node per group


def test_node_updates_keep_the_inventory_in_id_order() -> None:
    ledger = ledger_of(gpu_node("n2", 8), gpu_node("n1", 8))
    ledger.set_node(gpu_node("n0", 8))
    ledger.set_node(gpu_node("n1", 4))
    assert [n.id for n in ledger.inventory] == [NodeId("n0"), NodeId("n1"), NodeId("n2")]
    assert len(ledger.inventory.nodes[NodeId("n1")].gpus) == 4
    ledger.remove_node(NodeId("n0"))
    assert [n.id for n in ledger.inventory] == [NodeId("n1"), NodeId("n2")]


def test_model_weights_scale_usage_and_count_against_quota() -> None:
    from dataclasses import replace

    from nomad_gpu.domain.ids import Team

    h200 = "NVIDIA H200"
    ledger = ledger_of(gpu_node("n1", 8, h200))
    base = config(quotas={"a": 3.0})
    cfg = replace(base, fair=replace(base.fair, model_weights={h200: 1.5}))
    result = cycle(ledger, [job("j1", whole(2)), job("j2", whole(1))], cfg=cfg)
    assert isinstance(result.decisions[0], Admit)
    assert ledger.team_usage()[Team("a")] == 3.0  # 2 H200 x 1.5
    assert "quota" in str(waiting(result, "j2"))
