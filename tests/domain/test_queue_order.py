"""Queue ordering (priority, then fair share by decayed usage / weight, then submit time) and quotas."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.cycle import order_queue
from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy, UsageHistory
from nomad_gpu.domain.ids import EntryId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import WaitReason
from nomad_gpu.domain.requests import GpuAsk, JobRequest

from .builders import (
    admitted,
    config,
    cycle,
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

H = 3600.0


def order(queue: list[JobRequest], *, usage: dict[str, float] | None = None,
          weights: dict[str, float] | None = None, ledger: Ledger | None = None) -> list[str]:
    fair = FairShareConfig(half_life_s=H, teams={Team(t): TeamPolicy(weight=w) for t, w in (weights or {}).items()})
    hist = UsageHistory({Team(t): v * H for t, v in (usage or {}).items()}, as_of=0.0)
    return [j.entry for j in order_queue(queue, ledger or ledger_of(), hist, fair)]


@pytest.mark.parametrize(
    ("queue", "usage", "weights", "expected"),
    [
        pytest.param([job("old", at=1), job("new", at=2), job("mid", at=1.5)], None, None, ["old", "mid", "new"],
                     id="submit-time"),
        pytest.param([job("b", at=1), job("a", at=1)], None, None, ["a", "b"], id="ties-by-entry"),
        pytest.param([job("low", priority=10, at=0), job("high", priority=90, at=5), job("mid", priority=50, at=3)],
                     None, None, ["high", "mid", "low"], id="priority-first"),
        pytest.param([job("heavy", team="a", priority=90, at=0), job("light", team="b", priority=10, at=0)],
                     {"a": 100.0}, None, ["heavy", "light"], id="priority-beats-fair-share"),
        pytest.param([job("a1", team="a", at=0), job("b1", team="b", at=5)], {"a": 2.0}, None, ["b1", "a1"],
                     id="less-past-usage-first"),
        pytest.param([job("a1", team="a", at=0), job("b1", team="b", at=5)], {"a": 2.0, "b": 1.5}, {"b": 0.5},
                     ["a1", "b1"], id="usage-divided-by-weight"),
        pytest.param([job("a1", team="a", at=0), job("b1", team="b", at=5)], {"a": 4.0, "b": 1.5}, {"a": 4.0},
                     ["a1", "b1"], id="heavier-weight-earns-more"),
        pytest.param([job(f"a{k}", team="a", at=k) for k in range(3)] + [job(f"b{k}", team="b", at=10 + k)
                                                                          for k in range(3)],
                     None, None, ["a0", "a1", "a2", "b0", "b1", "b2"], id="idle-teams-tie-by-name"),
    ],
)
def test_order(queue: list[JobRequest], usage: dict[str, float] | None, weights: dict[str, float] | None,
               expected: list[str]) -> None:
    assert order(queue, usage=usage, weights=weights) == expected


def test_usage_held_now_counts_inside_one_cycle() -> None:
    """Two teams of 1-GPU jobs on 4 free GPUs: they alternate, so each gets 2."""
    ledger = ledger_of(gpu_node("n0", 4))
    queue = [job(f"a{k}", whole(1), team="a", at=k) for k in range(4)]
    queue += [job(f"b{k}", whole(1), team="b", at=10 + k) for k in range(4)]
    result = cycle(ledger, queue)
    assert [d.entry for d in result.admitted] == ["a0", "b0", "a1", "b1"]
    assert ledger.team_usage() == {Team("a"): 2.0, Team("b"): 2.0}


def test_weights_split_capacity_inside_one_cycle() -> None:
    ledger = ledger_of(gpu_node("n0", 8))
    queue = [job(f"a{k}", whole(1), team="a", at=k) for k in range(8)]
    queue += [job(f"b{k}", whole(1), team="b", at=k) for k in range(8)]
    cycle(ledger, queue, cfg=config(weights={"a": 3.0}))
    assert ledger.team_usage() == {Team("a"): 6.0, Team("b"): 2.0}


def test_holding_now_counts_against_a_team() -> None:
    ledger = ledger_of(gpu_node("n0", 8))
    occupy(ledger, "running", "n0", 4, team="a")
    assert order([job("a1", team="a", at=0), job("b1", team="b", at=9)], ledger=ledger) == ["b1", "a1"]


def test_past_usage_decays() -> None:
    """Team a used a lot long ago, team b a little recently: after enough half-lives a is ahead again."""
    hist = UsageHistory({Team("a"): 64 * H, Team("b"): 1 * H}, as_of=0.0)
    fair = FairShareConfig(half_life_s=H)
    queue = [job("a1", team="a", at=0), job("b1", team="b", at=5)]
    assert [j.entry for j in order_queue(queue, ledger_of(), hist, fair)] == ["b1", "a1"]
    later = hist.advance(10 * H, {}, H)
    later = UsageHistory({**later.decayed, Team("b"): 1 * H}, later.as_of)
    assert [j.entry for j in order_queue(queue, ledger_of(), later, fair)] == ["a1", "b1"]


def test_cycle_admits_in_queue_order_when_capacity_is_short() -> None:
    ledger = ledger_of(gpu_node("n0", 2))
    queue = [job("low", whole(1), priority=10, at=0), job("old", whole(1), at=1), job("new", whole(1), at=2),
             job("urgent", whole(1), priority=90, at=3)]
    result = cycle(ledger, queue)
    assert [d.entry for d in result.admitted] == ["urgent", "old"]
    assert [d.entry for d in result.decisions] == ["urgent", "old", "new", "low"]


# ---- quotas ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("quota", "asks", "admitted_entries"),
    [
        pytest.param(2.0, [whole(1), whole(1), whole(1)], ["j0", "j1"], id="whole-gpus"),
        pytest.param(0.0, [whole(1)], [], id="zero-quota"),
        pytest.param(1.0, [whole(2)], [], id="job-bigger-than-quota"),
        pytest.param(1.0, [mig("3g.40gb"), mig("3g.40gb"), mig("3g.40gb"), mig("1g.10gb")], ["j0", "j1", "j3"],
                     id="mig-in-sevenths"),
        pytest.param(1.0, [share(500), share(300), share(300), share(200)], ["j0", "j1", "j3"],
                     id="shares-in-thousandths"),
        pytest.param(1.0, [share(500), share(500)], ["j0", "j1"], id="exactly-at-quota"),
    ],
)
def test_quota(quota: float, asks: list[GpuAsk], admitted_entries: list[str]) -> None:
    ledger = ledger_of(make_node("n0", gpus=gpu_node("x").gpus + shared_gpus("n0", 2),
                                 migs=mig_slices("n0", "3g.40gb", 3) + mig_slices("n0", "1g.10gb", 4)))
    queue = [job(f"j{k}", a, team="q", at=k) for k, a in enumerate(asks)]
    result = cycle(ledger, queue, cfg=config(quotas={"q": quota}))
    assert [d.entry for d in result.admitted] == admitted_entries
    for d in result.decisions:
        if d.entry not in admitted_entries:
            assert waiting(result, d.entry).reason is WaitReason.QUOTA
    assert ledger.team_usage().get(Team("q"), 0.0) <= quota + 1e-9


def test_quota_binds_one_team_only_and_frees_on_release() -> None:
    ledger = ledger_of(gpu_node("n0", 8))
    cfg = config(quotas={"a": 2.0})
    queue = [job(f"a{k}", whole(1), team="a", at=k) for k in range(3)] + [job("b0", whole(1), team="b", at=9)]
    result = cycle(ledger, queue, cfg=cfg)
    assert {d.entry for d in result.admitted} == {"a0", "a1", "b0"}
    assert waiting(result, "a2").reason is WaitReason.QUOTA
    ledger.release(EntryId("a0"))
    result = cycle(ledger, [job("a2", whole(1), team="a", at=2)], cfg=cfg)
    admitted(result, "a2")


def test_quota_counts_gang_jobs_as_a_whole() -> None:
    ledger = ledger_of(gpu_node("n0", 8))
    result = cycle(ledger, [job("g", whole(2), groups=2, team="a")], cfg=config(quotas={"a": 3.0}))
    w = waiting(result, "g")
    assert w.reason is WaitReason.QUOTA and "needs 4" in w.detail
    assert EntryId("g") not in ledger
