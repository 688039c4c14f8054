"""Head-of-line holds: a big job that has waited past the threshold gets nodes held for it.

The contract (cycle.py): nothing else is placed on held nodes, so the holder is admitted after at
most the completions of what already runs on them.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.ids import EntryId, NodeId
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import WaitReason
from nomad_gpu.domain.requests import JobRequest

from .builders import (
    H100,
    admitted,
    config,
    cycle,
    gpu_node,
    job,
    ledger_of,
    nodes_of,
    occupy,
    waiting,
    whole,
)

HOL = 600.0
N0, N1, N2 = NodeId("n0"), NodeId("n1"), NodeId("n2")


def busy_pair(busy0: int = 3, busy1: int = 2) -> Ledger:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1"))
    for k in range(busy0):
        occupy(ledger, f"r0-{k}", "n0", 1)
    for k in range(busy1):
        occupy(ledger, f"r1-{k}", "n1", 1)
    return ledger


def smalls(start: float, n: int, prefix: str = "s") -> list[JobRequest]:
    return [job(f"{prefix}{k}", whole(1), at=start + k) for k in range(n)]


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "frag-aware"])
def test_no_hold_before_the_threshold(policy: str) -> None:
    ledger = busy_pair()
    result = cycle(ledger, [job("big", whole(8), at=0.0), *smalls(1.0, 3)], now=HOL - 1,
                   cfg=config(policy, hol=HOL))
    assert waiting(result, "big").reason is WaitReason.FRAGMENTED
    assert result.holds == {}
    assert len(result.admitted) == 3


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "frag-aware"])
def test_hold_keeps_small_jobs_off_the_held_node(policy: str) -> None:
    ledger = busy_pair()
    cfg = config(policy, hol=HOL)
    result = cycle(ledger, [job("big", whole(8), at=0.0), *smalls(1.0, 20)], now=HOL, cfg=cfg)
    assert waiting(result, "big").reason is WaitReason.HELD
    (held,) = result.holds[EntryId("big")]
    for d in result.admitted:
        assert held not in nodes_of(d)
    other = N1 if held == N0 else N0
    # everything that could go elsewhere did; the rest waits, reserved for the older job
    assert len(result.admitted) == (8 - (2 if other == N1 else 3))
    assert {waiting(result, f"s{k}").reason for k in range(len(result.admitted), 20)} == {WaitReason.RESERVED}


def test_hold_goes_to_the_node_closest_to_fitting() -> None:
    """n0 has 1 GPU free, n1 has 7: holding n1 needs one completion, holding n0 seven."""
    ledger = busy_pair(busy0=7, busy1=1)
    result = cycle(ledger, [job("big", whole(8), at=0.0)], now=HOL, cfg=config(hol=HOL))
    assert result.holds == {EntryId("big"): frozenset({N1})}


def test_holder_is_admitted_once_the_held_node_drains() -> None:
    ledger = busy_pair(busy0=3, busy1=2)
    cfg = config(hol=HOL)
    queue = [job("big", whole(8), at=0.0)]
    result = cycle(ledger, queue, now=HOL, cfg=cfg)
    (held,) = result.holds[EntryId("big")]
    running = sorted(ledger.entries_on(held))
    for k, entry in enumerate(running):
        ledger.release(entry)
        queue += smalls(HOL + k, 2, prefix=f"t{k}-")
        result = cycle(ledger, queue, now=HOL + k + 1, cfg=cfg, holds=dict(result.holds))
        queue = [j for j in queue if j.entry not in {d.entry for d in result.admitted}]
        if k < len(running) - 1:
            assert waiting(result, "big").reason is WaitReason.HELD
    assert nodes_of(admitted(result, "big")) == {held}
    assert result.holds == {}


def test_job_that_can_never_fit_does_not_block_protection_for_the_next() -> None:
    """The oldest starving job asks for more than any node has: the next starving job must get the hold."""
    ledger = busy_pair()
    queue = [job("huge", whole(16), at=0.0), job("big", whole(8), at=1.0), *smalls(2.0, 20)]
    result = cycle(ledger, queue, now=HOL + 10, cfg=config(hol=HOL, max_holds=1))
    assert waiting(result, "huge").reason is WaitReason.NO_SUCH_SHAPE
    assert waiting(result, "big").reason is WaitReason.HELD
    (held,) = result.holds[EntryId("big")]
    assert all(held not in nodes_of(d) for d in result.admitted)


def test_hold_ends_when_the_holder_leaves_the_queue() -> None:
    ledger = busy_pair()
    cfg = config(hol=HOL)
    result = cycle(ledger, [job("big", whole(8), at=0.0)], now=HOL, cfg=cfg)
    (held,) = result.holds[EntryId("big")]
    result = cycle(ledger, smalls(HOL, 11), now=HOL + 1, cfg=cfg, holds=dict(result.holds))  # big cancelled
    assert result.holds == {}
    assert len(result.admitted) == 11
    assert any(held in nodes_of(d) for d in result.admitted)


def test_hold_moves_when_the_held_node_goes_away() -> None:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1"), gpu_node("n2"))
    for n, busy in (("n0", 2), ("n1", 3), ("n2", 4)):
        for k in range(busy):
            occupy(ledger, f"{n}-{k}", n, 1)
    cfg = config(hol=HOL)
    queue = [job("big", whole(8), at=0.0)]
    result = cycle(ledger, queue, now=HOL, cfg=cfg)
    (held,) = result.holds[EntryId("big")]
    node = ledger.inventory.nodes[held]
    ledger.set_node(replace(node, draining=True))
    result = cycle(ledger, queue, now=HOL + 1, cfg=cfg, holds=dict(result.holds))
    assert waiting(result, "big").reason is WaitReason.HELD
    (moved,) = result.holds[EntryId("big")]
    assert moved != held


def test_only_the_top_priority_starves() -> None:
    ledger = busy_pair()
    queue = [job("old-low", whole(8), priority=10, at=0.0), job("new-high", whole(1), priority=90, at=HOL)]
    result = cycle(ledger, queue, now=HOL, cfg=config(hol=HOL))
    assert result.holds == {}
    admitted(result, "new-high")


def test_holder_of_another_model_holds_only_nodes_that_could_host_it() -> None:
    ledger = ledger_of(gpu_node("n0"), gpu_node("n1", model=H100))
    occupy(ledger, "h", "n1", 1)
    result = cycle(ledger, [job("big", whole(8, H100), at=0.0)], now=HOL, cfg=config(hol=HOL))
    assert result.holds == {EntryId("big"): frozenset({N1})}


# ---- the bound, as a property ------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(
    policy=st.sampled_from(["first-fit", "best-fit", "frag-aware"]),
    nodes=st.integers(2, 4),
    picks=st.lists(st.integers(0, 10_000), min_size=60, max_size=60),
    arrivals=st.lists(st.integers(1, 3), min_size=60, max_size=60),
)
def test_starving_big_job_is_admitted_within_the_completions_on_its_held_node(
    policy: str, nodes: int, picks: list[int], arrivals: list[int]
) -> None:
    """A busy cluster of 1-GPU jobs, a steady stream of new 1-GPU jobs and one 8-GPU job.

    Completions are chosen at random across the whole cluster. Once the big job holds a node, no
    other job lands there, and the big job is admitted no later than the cycle after the jobs that
    ran on that node when it was held have all finished: at most 8 (one node's GPUs) completions there.
    """
    ledger = ledger_of(*(gpu_node(f"n{k}") for k in range(nodes)))
    cfg = config(policy, hol=HOL)
    now = 0.0
    seq = 0
    queue = [job(f"s{seq + k}", whole(1), at=now) for k in range(8 * nodes)]
    seq += 8 * nodes
    result = cycle(ledger, queue, now=now, cfg=cfg)  # the cluster is full of 1-GPU jobs
    running = {d.entry for d in result.admitted}
    assert len(running) == 8 * nodes
    queue = [job("big", whole(8), at=now)]
    holds = dict(result.holds)
    held_on: set[EntryId] | None = None
    held: frozenset[NodeId] = frozenset()
    done_there = 0
    for step, (pick, new) in enumerate(zip(picks, arrivals, strict=True)):
        now = 100.0 * (step + 1)
        # one completion anywhere in the cluster
        if running:
            gone = sorted(running)[pick % len(running)]
            running.discard(gone)
            if held_on is not None and gone in held_on:
                done_there += 1
                held_on.discard(gone)
            ledger.release(EntryId(gone))
        queue += [job(f"s{seq + k}", whole(1), at=now) for k in range(new)]
        seq += new
        result = cycle(ledger, queue, now=now, cfg=cfg, holds=holds)
        holds = dict(result.holds)
        admitted_now = {d.entry: d for d in result.admitted}
        if held_on is not None:
            for entry, d in admitted_now.items():
                if entry != "big":
                    assert not nodes_of(d) & held, f"{entry} landed on held node(s) {sorted(held)}"
        if "big" in admitted_now:
            assert now >= HOL
            assert done_there <= 8
            return
        if held_on is None and EntryId("big") in holds:
            held = holds[EntryId("big")]
            held_on = {e for n in held for e in ledger.entries_on(n)}
            assert len(held_on) <= 8
        if held_on is not None:
            assert held_on, "every job on the held node finished, yet the big job was not admitted"
        running |= set(admitted_now)
        queue = [j for j in queue if j.entry not in admitted_now]
    assert held_on is not None and held_on, "the big job never got a hold although it waited past the threshold"

