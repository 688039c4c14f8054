"""Datacenters and node pools decided as Nomad decides them (the real-Nomad issue, section 4)."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.ids import EntryId, NodeId, Team
from nomad_gpu.domain.inventory import Node
from nomad_gpu.domain.requests import AllocAsk, JobRequest


def req(datacenters: tuple[str, ...] = (), pool: str | None = None, drivers: tuple[str, ...] = ()) -> JobRequest:
    return JobRequest(EntryId("e"), Team("t"), (AllocAsk("g"),), datacenters=frozenset(datacenters), node_pool=pool,
                      drivers=frozenset(drivers))


def node(dc: str = "dc1", pool: str = "default", name: str = "n1", drivers: frozenset[str] | None = None) -> Node:
    return Node(NodeId(name), datacenter=dc, node_pool=pool, drivers=drivers)


@pytest.mark.parametrize(("patterns", "dc", "ok"), [
    pytest.param(("*",), "us-east-1", True, id="star-any"),
    pytest.param(("dc1",), "dc1", True, id="exact"),
    pytest.param(("dc1",), "dc10", False, id="exact-no-prefix"),
    pytest.param(("us-*",), "us-east-1", True, id="prefix-glob"),
    pytest.param(("*-1",), "us-east-1", True, id="suffix-glob"),
    pytest.param(("us-*-1",), "us-east-2", False, id="middle-glob-miss"),
    pytest.param(("u*e*1",), "us-east-1", True, id="two-stars"),
    pytest.param(("dc?",), "dc1", False, id="question-mark-is-literal"),
    pytest.param(("dc[1]",), "dc1", False, id="brackets-are-literal"),
    pytest.param((), "anything", True, id="none-means-any"),
])
def test_datacenters_are_go_glob_patterns(patterns: tuple[str, ...], dc: str, ok: bool) -> None:
    # scheduler/util.go readyNodesInDCsAndPool matches with ryanuber/go-glob (v2.0.5): only `*` is special
    assert req(patterns).places_on(node(dc)) is ok


def test_a_pool_named_in_the_spec_is_the_only_pool() -> None:
    assert req(pool="gpu").places_on(node(pool="gpu"))
    assert not req(pool="gpu").places_on(node(pool="default"))
    assert req().places_on(node(pool="gpu")), "None (the simulator's jobs): any pool"


def test_the_all_pool_is_every_node() -> None:
    # scheduler/util.go readyNodesInDCsAndPool (v2.0.5): `all` scans state.Nodes, not one pool's
    assert req(pool="all").places_on(node(pool="reserved")) and req(pool="all").places_on(node())


def test_every_driver_must_be_healthy_on_the_node() -> None:
    # scheduler/feasible/feasible.go DriverChecker (v2.0.5): a missing or unhealthy driver filters the node
    assert req(drivers=("docker",)).places_on(node(drivers=frozenset({"docker", "exec"})))
    assert not req(drivers=("docker",)).places_on(node(drivers=frozenset({"exec"})))
    assert req(drivers=("docker",)).places_on(node(drivers=None)), "unknown: left to Nomad"


def test_avoided_nodes_are_left_out() -> None:
    from dataclasses import replace

    job = replace(req(), avoid_nodes=frozenset({NodeId("n1")}))
    assert not job.places_on(node(name="n1")) and job.places_on(node(name="n2"))
