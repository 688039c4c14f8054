"""Asks with tiers of alternatives: the first tier with a feasible option wins, the score chooses
within a tier, quotas and holds work per alternative, and a plain ask is the one-option case."""

from __future__ import annotations

from nomad_gpu.domain.ids import EntryId, Team
from nomad_gpu.domain.requests import AllocAsk, JobRequest

from .builders import (
    A100,
    H100,
    L40S,
    admitted,
    config,
    cycle,
    gpu_node,
    ledger_of,
    make_node,
    mig,
    mig_slices,
    occupy,
    waiting,
    whole,
    whole_gpus,
)


def tiered(entry: str, *tiers: tuple[object, ...], team: str = "a", at: float = 0.0, groups: int = 1,
           one_node: bool = False) -> JobRequest:
    ask_tiers = tuple(tuple(t) for t in tiers)
    asks = tuple(AllocAsk(f"g{k}", 0, 0, 0, tiers=ask_tiers) for k in range(groups))  # type: ignore[arg-type]
    return JobRequest(EntryId(entry), Team(team), asks, submitted_at=at, one_node=one_node)


def test_the_first_tier_with_a_feasible_option_wins() -> None:
    ledger = ledger_of(make_node("m1", migs=mig_slices("m1", "2g.20gb", 2)), gpu_node("w1", 2))
    got = admitted(cycle(ledger, [tiered("j", (mig("2g.20gb"),), (whole(1),))]), "j")
    (p,) = got.placements
    assert (p.node, p.kind, p.tier) == ("m1", "mig", 1)
    assert p.note == "tier 1 of 2: 1 x MIG 2g.20gb"


def test_a_later_tier_is_taken_only_when_the_earlier_fits_nowhere_and_says_why() -> None:
    ledger = ledger_of(make_node("m1", migs=mig_slices("m1", "2g.20gb", 1)), gpu_node("w1", 2))
    occupy(ledger, "busy", "w1", 0)
    first = admitted(cycle(ledger, [tiered("j1", (mig("2g.20gb"),), (whole(1),))]), "j1")
    assert first.placements[0].kind == "mig"
    second = admitted(cycle(ledger, [tiered("j2", (mig("2g.20gb"),), (whole(1),))]), "j2")
    (p,) = second.placements
    assert (p.node, p.kind, p.tier, p.instance_ids) == ("w1", "whole", 2, ("GPU-w1-0",))
    assert p.note.startswith("tier 2 of 2: 1 x GPU; tier 1: not enough free capacity of this shape")


def test_within_a_tier_the_score_chooses_as_for_one_ask_with_both_models() -> None:
    # best fit: the A100 node has one GPU left, the L40S node four; one ask naming both models goes to
    # the A100, and so does a tier of one alternative per model
    nodes = [make_node("a", gpus=whole_gpus("a", 2, A100)), make_node("l", gpus=whole_gpus("l", 4, L40S))]
    plain_ledger, tier_ledger = ledger_of(*nodes), ledger_of(*nodes)
    for ledger in (plain_ledger, tier_ledger):
        occupy(ledger, "busy", "a", 1)
    both = JobRequest(EntryId("p"), Team("a"), (AllocAsk("g0", 0, 0, 0, whole(1, A100, L40S)),))
    plain = admitted(cycle(plain_ledger, [both]), "p")
    alt = admitted(cycle(tier_ledger, [tiered("t", (whole(1, L40S), whole(1, A100)))]), "t")
    assert [p.instance_ids for p in alt.placements] == [p.instance_ids for p in plain.placements] == [("GPU-a-1",)]
    assert alt.placements[0].device_name == A100 and alt.placements[0].tier == 1


def test_a_dearer_alternative_is_not_offered_past_the_quota() -> None:
    ledger = ledger_of(gpu_node("w1", 4))
    cfg = config(quotas={"a": 1.0})
    got = admitted(cycle(ledger, [tiered("j", (whole(2),), (whole(1),))], cfg=cfg), "j")
    (p,) = got.placements
    assert (p.tier, len(p.instance_ids)) == (2, 1)
    assert "tier 1: over the team's quota" in p.note


def test_nothing_fits_names_every_tier() -> None:
    ledger = ledger_of(gpu_node("w1", 1, H100))
    wait = waiting(cycle(ledger, [tiered("j", (mig("3g.40gb"),), (whole(2),))]), "j")
    assert "tier 1: no node offers this shape of GPU" in wait.detail
    assert "tier 2: no node offers this shape of GPU" in wait.detail


def test_a_starving_tiered_job_holds_a_node_its_later_tier_fits() -> None:
    ledger = ledger_of(gpu_node("w1", 2))
    occupy(ledger, "busy", "w1", 2)
    result = cycle(ledger, [tiered("old", (mig("2g.20gb"),), (whole(2),))], now=10_000.0)
    assert result.holds == {EntryId("old"): frozenset({"w1"})}


def test_a_one_node_gang_takes_each_groups_first_tier_that_fits_there() -> None:
    ledger = ledger_of(make_node("n", gpus=whole_gpus("n", 2), migs=mig_slices("n", "1g.10gb", 1)))
    got = admitted(cycle(ledger, [tiered("g", (mig("1g.10gb"),), (whole(1),), groups=2, one_node=True)]), "g")
    assert [(p.kind, p.tier) for p in got.placements] == [("mig", 1), ("whole", 2)]


def test_a_plain_ask_is_the_one_option_case() -> None:
    ledger = ledger_of(gpu_node("w1", 2))
    got = admitted(cycle(ledger, [JobRequest(EntryId("p"), Team("a"), (AllocAsk("g0", 0, 0, 0, whole(1)),))]), "p")
    (p,) = got.placements
    assert (p.kind, p.tier, p.note) == ("whole", 0, "")
    assert AllocAsk("g0", gpu=whole(1)).alternatives() == (AllocAsk("g0", gpu=whole(1)),)
