"""The minimal victim set (nomad_gpu/domain/victims.py), over random nodes of whole, shared and MIG devices.

The model: a node's devices, each either free or held by some running candidates (a whole GPU or a MIG
instance by one, a shared GPU by several); the waiting job needs `k` free devices. A device is free once
every tenant on it is a victim, so the fit is monotone (more victims never hurt) but not additive, which
is what makes minimality worth testing.
"""

from __future__ import annotations

import random
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.ids import EntryId
from nomad_gpu.domain.victims import EXHAUSTIVE_UP_TO, Candidate, minimal_victims, preference


def _node(draw: st.DrawFn) -> tuple[list[Candidate], dict[int, set[EntryId]], int, int]:
    devices = draw(st.integers(1, 8))
    n = draw(st.integers(0, 10))
    cands = [Candidate(EntryId(f"e{i}"), gpus=0.0, priority=draw(st.integers(0, 3)),
                       started_at=float(draw(st.integers(0, 5))), preemptible=draw(st.booleans()))
             for i in range(n)]
    tenants: dict[int, set[EntryId]] = {d: set() for d in range(devices)}
    shares: dict[EntryId, float] = {c.entry: 0.0 for c in cands}
    for c in cands:
        for d in draw(st.sets(st.integers(0, devices - 1), min_size=1, max_size=2)) if devices else ():
            tenants[d].add(c.entry)
    for ts in tenants.values():
        for t in ts:
            shares[t] += 1.0 / len(ts)
    cands = [Candidate(c.entry, round(shares[c.entry], 6), c.priority, c.started_at, c.preemptible) for c in cands]
    free0 = sum(1 for ts in tenants.values() if not ts)
    need = draw(st.integers(1, devices))
    return cands, tenants, free0, need


nodes = st.composite(_node)()


def _fits(tenants: dict[int, set[EntryId]], need: int):
    def fits(victims: frozenset[EntryId]) -> bool:
        return sum(1 for ts in tenants.values() if ts <= victims) >= need
    return fits


@settings(max_examples=400, deadline=None)
@given(nodes)
def test_the_set_fits_is_minimal_and_takes_only_preemptible_work(node) -> None:
    cands, tenants, _free0, need = node
    fits = _fits(tenants, need)
    chosen = minimal_victims(cands, fits)
    allowed = frozenset(c.entry for c in cands if c.preemptible)
    if chosen is None:
        assert not fits(allowed), "a set existed: every preemptible candidate together fits"
        return
    ids = frozenset(c.entry for c in chosen)
    assert ids <= allowed, "a non-preemptible entry was chosen"
    assert fits(ids)
    for c in chosen:
        assert not fits(ids - {c.entry}), f"{c.entry} was not needed"


@settings(max_examples=300, deadline=None)
@given(nodes)
def test_the_set_is_the_most_preferred_of_all_that_fit(node) -> None:
    cands, tenants, _free0, need = node
    fits = _fits(tenants, need)
    chosen = minimal_victims(cands, fits)
    pool = [c for c in cands if c.preemptible]
    assert len(pool) <= EXHAUSTIVE_UP_TO
    fitting = [s for n in range(len(pool) + 1) for s in combinations(pool, n)
               if fits(frozenset(c.entry for c in s))]
    if not fitting:
        assert chosen is None
        return
    assert chosen is not None
    assert preference(chosen) == min(preference(s) for s in fitting)


@settings(max_examples=200, deadline=None)
@given(nodes, st.randoms(use_true_random=False))
def test_the_same_node_in_any_order_gives_the_same_set(node, rnd: random.Random) -> None:
    cands, tenants, _free0, need = node
    fits = _fits(tenants, need)
    shuffled = list(cands)
    rnd.shuffle(shuffled)
    assert minimal_victims(cands, fits) == minimal_victims(shuffled, fits)


def test_a_job_that_fits_already_stops_nothing() -> None:
    one = Candidate(EntryId("a"), 1.0, 0, 0.0)
    assert minimal_victims([one], lambda v: True) == ()


def test_fewest_gpus_then_lowest_priority_then_most_recent_start() -> None:
    big = Candidate(EntryId("big"), 2.0, 0, 0.0)
    low_old = Candidate(EntryId("low-old"), 1.0, 0, 10.0)
    low_new = Candidate(EntryId("low-new"), 1.0, 0, 50.0)
    high = Candidate(EntryId("high"), 1.0, 5, 60.0)
    pool = [big, low_old, low_new, high]
    gpus = {c.entry: c.gpus for c in pool}

    def one_gpu(v: frozenset[EntryId]) -> bool:
        return sum(gpus[e] for e in v) >= 1

    assert minimal_victims(pool, one_gpu) == (low_new,)  # not the 2-GPU job, not the higher priority
    assert minimal_victims([big, high], one_gpu) == (high,)  # fewer GPUs stopped outranks priority


def test_past_the_exhaustive_bound_the_greedy_set_is_still_minimal() -> None:
    pool = [Candidate(EntryId(f"e{i:02}"), 1.0, i % 3, float(i)) for i in range(EXHAUSTIVE_UP_TO + 8)]

    def three(v: frozenset[EntryId]) -> bool:
        return len(v) >= 3

    chosen = minimal_victims(pool, three)
    assert chosen is not None and len(chosen) == 3
    assert all(c.priority == 0 for c in chosen), "the lowest priority goes first"
    assert {c.entry for c in chosen} == {"e18", "e15", "e12"}, "then the most recently started"
