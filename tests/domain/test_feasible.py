"""Could a job ever run on the fleet? Tables of fleets and asks, each with the line a user reads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nomad_gpu.domain.feasible import never_runs, shapes
from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Node, NodeStatus
from nomad_gpu.domain.requests import JobRequest
from tests.domain.builders import (
    A100,
    H100,
    L40S,
    ask,
    gang,
    gpu_node,
    job,
    make_node,
    mig,
    mig_slices,
    share,
    shared_gpus,
    whole,
    whole_gpus,
)

FLEET = (
    gpu_node("a1", 8, A100),
    gpu_node("h1", 4, H100, datacenter="dc2"),
    make_node("mig1", migs=mig_slices("mig1", "3g.40gb", 2, H100), datacenter="dc2"),
    make_node("sh1", gpus=shared_gpus("sh1", 2, L40S)),
    make_node("big", gpus=(), cpu=200_000, mem=2_000_000, node_pool="reserved"),
)


@pytest.mark.parametrize(("request_", "words"), [
    pytest.param(job("j", whole(9)), "at most 8 on one node here", id="nine-gpus"),
    pytest.param(job("j", whole(1, "NVIDIA A100-PCIE-40GB")),
                 f"models here: {A100}, {H100}", id="model-not-here"),
    pytest.param(job("j", whole(1, min_memory_mib=200_000)), "at most 81920 MiB per GPU here", id="gpu-memory"),
    pytest.param(job("j", mig("1g.5gb")), "MIG profiles here: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb",
                 id="mig-profile"),
    pytest.param(job("j", mig("3g.40gb", 3)), "at most 2 on one node here", id="mig-count"),
    pytest.param(job("j", whole(1), mem=2_000_000),
                 "2000000 MB memory on one node; at most 64000 MHz and 512000 MB on one node with such GPUs here",
                 id="memory"),
    pytest.param(job("j", whole(1), node_pool="gpu-less"), "node pools here: default, reserved", id="no-pool"),
    pytest.param(job("j", whole(4, H100), datacenters=["dc1"]), "no GPU of model",
                 id="model-outside-datacenter"),
    pytest.param(gang("j", ask("a", whole(6)), ask("b", whole(6)), one_node=True),
                 "no one node holds all 2 of its allocations together", id="gang-on-one-node"),
])
def test_refused_with_the_nearest(request_: JobRequest, words: str) -> None:
    why = never_runs(request_, FLEET)
    assert why is not None
    assert words in str(why)


@pytest.mark.parametrize("request_", [
    pytest.param(job("j", whole(8)), id="a-full-node"),
    pytest.param(job("j", whole(4, H100)), id="a-model"),
    pytest.param(job("j", mig("3g.40gb", 2)), id="mig-as-reported"),
    pytest.param(job("j", mig("1g.10gb", 7)), id="mig-after-a-re-layout"),
    pytest.param(job("j", share(500)), id="a-share"),
    pytest.param(job("j", None, mem=2_000_000, node_pool="reserved"), id="cpu-only-in-its-pool"),
    pytest.param(job("j", whole(8), datacenters=["d*1"]), id="datacenter-glob"),
])
def test_possible_jobs_pass(request_: JobRequest) -> None:
    assert never_runs(request_, FLEET) is None


def test_down_and_ineligible_nodes_count_they_may_come_back() -> None:
    fleet = (gpu_node("a1", 8, A100, status=NodeStatus.DOWN), gpu_node("a2", 8, A100, eligible=False))
    assert never_runs(job("j", whole(8)), fleet) is None


def test_full_size_not_free_capacity_decides() -> None:
    """The check never looks at what is free now: a job waiting for busy GPUs is not refused."""
    assert never_runs(job("j", whole(8)), (gpu_node("a1", 8, A100),)) is None


def test_nodes_outside_scope_are_named_as_a_hint() -> None:
    """A job that names no pool may go to any pool (the service renders the chosen node's pool); one that
    names a pool is held to it, and told that another would do."""
    assert never_runs(job("j", None, mem=2_000_000), FLEET) is None
    why = never_runs(job("j", None, mem=2_000_000, node_pool="default"), FLEET)
    assert why is not None and "nodes outside its node pool or datacenters could run it" in str(why)
    assert str(why).startswith("2000000 MB memory on one node; at most 64000 MHz and 512000 MB on one node here")


def test_an_empty_fleet_runs_nothing() -> None:
    why = never_runs(job("j", whole(1)), ())
    assert why is not None and "node pools here: none" in str(why)


def test_unknown_mig_model_offers_only_what_it_reports() -> None:
    fleet: tuple[Node, ...] = (make_node("m", migs=mig_slices("m", "2g.12gb", 2, "Vendor X1")),)
    assert never_runs(job("j", mig("2g.12gb", 2)), fleet) is None
    why = never_runs(job("j", mig("1g.6gb")), fleet)
    assert why is not None and "MIG profiles here: 2g.12gb" in str(why)


# ---- the fleet's shapes answer as the whole fleet does -------------------------------------------
def _twin(node: Node, name: str) -> Node:
    """``node`` under another name, its devices renamed alike (the same shape, another identity)."""
    def rename(text: str) -> InstanceId:
        return InstanceId(text.replace(str(node.id), name))
    gpus = tuple(replace(g, id=rename(g.id), share_ids=tuple(rename(s) for s in g.share_ids)) for g in node.gpus)
    migs = tuple(replace(m, id=rename(m.id)) for m in node.migs)
    return replace(node, id=NodeId(name), name=name, gpus=gpus, migs=migs)


REQUESTS = [
    job("j", whole(9)), job("j", whole(1, "NVIDIA A100-PCIE-40GB")), job("j", whole(1, min_memory_mib=200_000)),
    job("j", mig("1g.5gb")), job("j", mig("3g.40gb", 3)), job("j", whole(1), mem=2_000_000),
    job("j", whole(1), node_pool="gpu-less"), job("j", whole(4, H100), datacenters=["dc1"]),
    gang("j", ask("a", whole(6)), ask("b", whole(6)), one_node=True), job("j", whole(8)), job("j", whole(4, H100)),
    job("j", mig("3g.40gb", 2)), job("j", mig("1g.10gb", 7)), job("j", share(500)),
    gang("j", ask("a", share(700)), ask("b", share(700)), one_node=True),
    job("j", None, mem=2_000_000, node_pool="reserved"), job("j", whole(8), datacenters=["d*1"]),
    job("j", whole(2), cpu=100_000), job("j", whole(4, H100), node_pool="reserved"),
]


def test_a_fleet_of_alike_nodes_is_one_shape() -> None:
    fleet = [_twin(gpu_node("a0", 8, A100), f"a{k}") for k in range(50)]
    assert shapes(fleet) == [fleet[0]]
    assert len(shapes([*fleet, gpu_node("h1", 4, H100), gpu_node("a1", 8, A100, status=NodeStatus.DOWN)])) == 3


def test_a_node_unlike_the_others_is_a_shape_of_its_own() -> None:
    one_unhealthy = make_node("a9", gpus=whole_gpus("a9", 8, A100, unhealthy=[3]))
    other_pool = gpu_node("a8", 8, A100, node_pool="reserved")
    assert len(shapes([gpu_node("a0", 8, A100), one_unhealthy, other_pool])) == 3


@pytest.mark.parametrize("request_", [pytest.param(r, id=f"r{i}") for i, r in enumerate(REQUESTS)])
def test_the_shapes_answer_as_the_whole_fleet(request_: JobRequest) -> None:
    fleet = [*FLEET, *(_twin(n, f"{n.id}-copy{k}") for k in range(3) for n in FLEET)]
    assert len(shapes(fleet)) == len(FLEET)
    assert never_runs(request_, shapes(fleet)) == never_runs(request_, fleet)
