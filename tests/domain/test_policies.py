"""Placement policies, checked by what any policy of that name must do (not by exact scores).

- first-fit: the first node in priority (inventory id) order that can host the job;
- best-fit: the node left with the least free capacity of the asked kind;
- frag-aware: keeps whole nodes (and untouched shared GPUs) whole when a small job fits elsewhere.
"""

from __future__ import annotations

import pytest

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.inventory import GpuMode
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.policies import POLICIES, get_policy
from nomad_gpu.domain.requests import GpuAsk, JobRequest

from .builders import (
    A100,
    H100,
    admitted,
    cycle,
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

NAMED = ["first-fit", "best-fit", "frag-aware"]
ALL = sorted(POLICIES)
"""Every registered policy: what any of them places must be feasible."""


def staircase() -> Ledger:
    """n0 empty, n1 2 free, n2 1 free, n3 4 free, n4 empty (8 x A100 each)."""
    ledger = ledger_of(*(gpu_node(f"n{k}") for k in range(5)))
    occupy(ledger, "b1", "n1", 6)
    occupy(ledger, "b2", "n2", 7)
    occupy(ledger, "b3", "n3", 4)
    return ledger


def test_policy_names() -> None:
    assert set(NAMED) <= set(ALL)
    for name in ALL:
        assert get_policy(name).name == name
    with pytest.raises(InvalidRequest, match="unknown policy 'worst-fit'"):
        get_policy("worst-fit")


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        pytest.param(1, "n0", id="1-gpu-first-node"),
        pytest.param(2, "n0", id="2-gpu-first-node"),
        pytest.param(8, "n0", id="8-gpu-first-node"),
    ],
)
def test_first_fit_takes_the_first_node_that_fits(count: int, expected: str) -> None:
    ledger = staircase()
    got = admitted(cycle(ledger, [job("j", whole(count))], policy="first-fit"), "j")
    assert nodes_of(got) == {NodeId(expected)}


@pytest.mark.parametrize(
    ("busy", "count", "expected"),
    [
        pytest.param({"n0": 8}, 1, "n1", id="skips-a-full-node"),
        pytest.param({"n0": 8}, 3, "n3", id="skips-nodes-too-small"),
        pytest.param({"n0": 8, "n4": 1}, 8, None, id="no-node-has-8"),
    ],
)
def test_first_fit_in_rank_order(busy: dict[str, int], count: int, expected: str | None) -> None:
    ledger = staircase()
    for node, n in busy.items():
        occupy(ledger, f"x-{node}", node, n)
    result = cycle(ledger, [job("j", whole(count))], policy="first-fit")
    if expected is None:
        waiting(result, "j")
    else:
        assert nodes_of(admitted(result, "j")) == {NodeId(expected)}


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        pytest.param(1, "n2", id="1-gpu-tightest"),
        pytest.param(2, "n1", id="2-gpu-exact"),
        pytest.param(3, "n3", id="3-gpu-next-up"),
        pytest.param(5, {"n0", "n4"}, id="5-gpu-only-empty-nodes"),
    ],
)
def test_best_fit_leaves_the_least_free(count: int, expected: str | set[str]) -> None:
    ledger = staircase()
    got = nodes_of(admitted(cycle(ledger, [job("j", whole(count))], policy="best-fit"), "j"))
    allowed = {expected} if isinstance(expected, str) else expected
    assert got <= {NodeId(n) for n in allowed} and len(got) == 1


@pytest.mark.parametrize("policy", ["frag-aware", "best-fit"])
@pytest.mark.parametrize(
    "queue",
    [
        pytest.param([job("j", whole(1))], id="alone"),
        pytest.param([job("j", whole(1)), job("big", whole(8), at=1.0)], id="with-8-gpu-demand"),
        pytest.param([job("j", whole(1))] + [job(f"s{k}", whole(1), at=1.0 + k) for k in range(5)],
                     id="with-small-demand"),
    ],
)
def test_small_job_keeps_empty_nodes_whole(policy: str, queue: list[JobRequest]) -> None:
    ledger = staircase()
    result = cycle(ledger, queue, policy=policy)
    assert nodes_of(admitted(result, "j")) <= {NodeId("n1"), NodeId("n2"), NodeId("n3")}
    if any(j.entry == "big" for j in queue):
        assert nodes_of(admitted(result, "big")) <= {NodeId("n0"), NodeId("n4")}


def test_frag_aware_leaves_room_for_the_8_gpu_job_that_first_fit_blocks() -> None:
    """One empty node; a 1-GPU job then an 8-GPU job: first-fit breaks the node, frag-aware does not."""
    def run(policy: str) -> tuple[bool, bool]:
        ledger = ledger_of(gpu_node("n0"), gpu_node("n1"))
        occupy(ledger, "busy", "n1", 4)
        result = cycle(ledger, [job("small", whole(1)), job("big", whole(8), at=1.0)], policy=policy)
        return (admitted(result, "small") is not None, any(d.entry == "big" for d in result.admitted))

    assert run("frag-aware") == (True, True)
    assert run("best-fit") == (True, True)
    assert run("first-fit") == (True, False)


def test_frag_aware_puts_a_share_on_a_started_gpu_when_whole_gpu_shares_are_in_demand() -> None:
    """A fresh shared GPU is what a 1000-milli share needs: a small share goes on the started one."""
    ledger = ledger_of(make_node("n0", gpus=shared_gpus("n0", 2)), make_node("n1", gpus=shared_gpus("n1", 1)))
    cycle(ledger, [job("first", share(500, A100))], policy="first-fit")  # lands on GPU-n0-s0
    queue = [job("j", share(250)), job("full-1", share(1000), at=1), job("full-2", share(1000), at=2)]
    result = cycle(ledger, queue, policy="frag-aware")
    (p,) = admitted(result, "j").placements
    assert p.instance_ids == ("GPU-n0-s0",)
    assert {d.entry for d in result.admitted} == {"j", "full-1", "full-2"}


@pytest.mark.parametrize("policy", ["frag-aware", "best-fit"])
def test_mig_goes_where_fewest_instances_of_the_profile_are_left(policy: str) -> None:
    ledger = ledger_of(make_node("n0", migs=mig_slices("n0", "1g.10gb", 4)),
                       make_node("n1", migs=mig_slices("n1", "1g.10gb", 1)))
    got = admitted(cycle(ledger, [job("j", mig("1g.10gb"))], policy=policy), "j")
    assert got.placements[0].instance_ids == ("MIG-n1-1g-0",)


# ---- what every policy must respect ------------------------------------------------------------

def mixed() -> Ledger:
    return ledger_of(
        make_node("n0", gpus=whole_gpus("n0", 2, H100) + shared_gpus("n0", 2, slots=2),
                  migs=mig_slices("n0", "3g.40gb", 2) + mig_slices("n0", "1g.10gb", 3, unhealthy=[0])),
        make_node("n1", gpus=whole_gpus("n1", 4, A100, memory_mib=40_960, unhealthy=[0])
                  + shared_gpus("n1", 1, mode=GpuMode.FLEX)),
        make_node("n2", gpus=whole_gpus("n2", 8, A100), draining=True),
    )


@pytest.mark.parametrize("policy", ALL)
@pytest.mark.parametrize(
    ("gpu", "kind_ok"),
    [
        pytest.param(whole(2, H100), lambda ids: all(i.startswith("GPU-n0-") and "-s" not in i for i in ids),
                     id="h100-only-on-n0"),
        pytest.param(whole(3, A100), lambda ids: all(i.startswith("GPU-n1-") and i != "GPU-n1-0" for i in ids),
                     id="a100-healthy-on-schedulable"),
        pytest.param(whole(1, min_memory_mib=60_000), lambda ids: ids[0] in {"GPU-n0-0", "GPU-n0-1"},
                     id="memory-floor"),
        pytest.param(mig("3g.40gb", 2), lambda ids: set(ids) == {"MIG-n0-3g-0", "MIG-n0-3g-1"}, id="mig-3g"),
        pytest.param(mig("1g.10gb", 2), lambda ids: set(ids) == {"MIG-n0-1g-1", "MIG-n0-1g-2"},
                     id="mig-skips-unhealthy"),
        pytest.param(share(700), lambda ids: ids[0] in {"GPU-n0-s0", "GPU-n0-s1", "GPU-n1-s0"}, id="share"),
    ],
)
def test_every_policy_places_only_on_fitting_healthy_schedulable_instances(
    policy: str, gpu: GpuAsk, kind_ok: object
) -> None:
    ledger = mixed()
    got = admitted(cycle(ledger, [job("j", gpu)], policy=policy), "j")
    (p,) = got.placements
    assert kind_ok(p.instance_ids)  # type: ignore[operator]
    assert p.node != "n2"


@pytest.mark.parametrize("policy", NAMED)
def test_named_policies_are_deterministic(policy: str) -> None:
    asks: list[GpuAsk] = [whole(1), share(300), mig("1g.10gb"), whole(2, A100), share(800), whole(1, H100)]
    queue = [job(f"j{k}", g, at=float(k)) for k, g in enumerate(asks)]

    def run() -> list[object]:
        ledger = mixed()
        return list(cycle(ledger, queue, policy=policy).decisions)

    assert run() == run()
