"""A pinned request is tried on its node alone; a refusal still reports every node as Nomad counts it."""

from __future__ import annotations

import nomad
import pytest

from nomad_gpu.devcluster.jobs import Constraint, GroupAsk
from nomad_gpu.devcluster.passviews import pinned_node

from .conftest import TWO_NODES, ClusterFactory
from .helpers import job_allocs, jobspec, submit

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def test_a_refused_pin_reports_every_node(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url)
    n2 = cluster.node_ids()["n2"]
    submit(client, jobspec("too-big", gpus=1, cpu=9000, node=n2, duration=3600))
    (pending,) = [p for p in cluster.audit()["pending"] if p["job_id"] == "too-big"]
    assert pending["reasons"] == {f"constraint ${{node.unique.id}} = {n2}": 1, "resources exhausted: cpu": 1,
                                  "missing compatible datacenter": 1}


def test_placements_in_one_pass_count_on_the_pinned_node(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url)
    n2 = cluster.node_ids()["n2"]
    submit(client, jobspec("first", gpus=1, cpu=3000, node=n2, duration=3600))
    # Three allocations in one pass: two fit beside "first" on CPU (3,000 + 2 x 2,500 <= 8,000)
    # but only one GPU is left, so exactly one is placed, and the others wait on devices.
    submit(client, jobspec("trio", gpus=1, cpu=2500, count=3, node=n2, duration=3600))
    placed = job_allocs(cluster.audit(), "trio")
    assert [a["node_id"] for a in placed] == [n2]
    (pending, _) = [p for p in cluster.audit()["pending"] if p["job_id"] == "trio"]
    assert "devices: no devices match request" in pending["reasons"]


def test_only_a_literal_equality_on_the_node_id_pins() -> None:
    assert pinned_node(_ask(Constraint("${node.unique.id}", "abc", "="))) == "abc"
    assert pinned_node(_ask(Constraint("${node.unique.id}", "abc", "=="))) == "abc"
    assert pinned_node(_ask(Constraint("${node.unique.id}", "abc", "!="))) is None
    assert pinned_node(_ask(Constraint("${node.unique.id}", "${meta.x}", "="))) is None
    assert pinned_node(_ask(Constraint("${node.unique.name}", "abc", "="))) is None


def _ask(constraint: Constraint) -> GroupAsk:
    return GroupAsk(namespace="default", job_id="j", job_type="batch", group="g", datacenters=("dc1",),
                    node_pool="default", constraints=(constraint,), tasks=(), duration_s=1.0, fails=False,
                    share_milli=None, reschedule_attempts=0, reschedule_unlimited=False)
