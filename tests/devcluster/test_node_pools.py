"""Node pools and datacenters as Nomad's scheduler reads them: a job without `node_pool` gets
`default` (`nomad/job_endpoint_hook_node_pool_ce.go`, v2.0.5) and only that pool's nodes are scanned
(`scheduler/util.go` readyNodesInDCsAndPool); `all` scans every pool; an unknown pool is refused
(`nomad/job_endpoint_hook_node_pool.go`); datacenters default to `["*"]` and match by glob, `*` only
(`Node.IsInAnyDC`, ryanuber/go-glob)."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import CLUSTERS, TWO_NODES, ClusterFactory
from .helpers import job_allocs, jobspec, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


@pytest.fixture
def fleet(make_cluster: ClusterFactory) -> DevCluster:
    return make_cluster(CLUSTERS / "mixed-fleet.yaml")


def _register(cluster: DevCluster, job_id: str, *, pool: str | None = None, datacenters: list[str] | None = None,
              **options: Any) -> requests.Response:
    client = nomad.Nomad(address=cluster.url, timeout=5)
    job = dict(client.jobs.parse(jobspec(job_id, duration=3600, **options), canonicalize=False))
    job["Datacenters"] = datacenters
    if pool is not None:
        job["NodePool"] = pool
    return requests.post(f"{cluster.url}/v1/jobs", json={"Job": job}, timeout=5)


def _node_name(cluster: DevCluster, job_id: str) -> str:
    (alloc,) = wait_until(lambda: job_allocs(cluster.audit(), job_id), what=f"{job_id} placed")
    return next(name for name, node_id in cluster.node_ids().items() if node_id == alloc["node_id"])


def test_a_bundled_cluster_has_two_pools(fleet: DevCluster) -> None:
    pools = {n["NodePool"] for n in requests.get(f"{fleet.url}/v1/nodes", timeout=5).json()}
    assert pools == {"default", "reserved"}


def test_a_job_without_a_pool_never_reaches_another_pools_nodes(fleet: DevCluster) -> None:
    assert _register(fleet, "h200-default", gpus=1, device="nvidia/gpu/NVIDIA H200").status_code == 200
    job = nomad.Nomad(address=fleet.url, timeout=5).job.get_job("h200-default")
    assert (job["NodePool"], job["Datacenters"]) == ("default", ["*"])
    assert job_allocs(fleet.audit(), "h200-default") == []
    (blocked,) = [e for e in requests.get(f"{fleet.url}/v1/job/h200-default/evaluations", timeout=5).json()
                  if e["Status"] == "blocked"]
    metric = blocked["FailedTGAllocs"]["main"]
    # Only the default pool's nodes are evaluated; the H200 node is never looked at.
    assert metric["NodesEvaluated"] == 6 and metric["NodesInPool"] == 6
    assert metric["ConstraintFiltered"] == {"missing devices": 6}

    assert _register(fleet, "h200-reserved", pool="reserved", gpus=1,
                     device="nvidia/gpu/NVIDIA H200").status_code == 200
    assert _node_name(fleet, "h200-reserved") == "h200-reserved-1"
    assert _register(fleet, "h200-all", pool="all", gpus=1, device="nvidia/gpu/NVIDIA H200").status_code == 200
    assert _node_name(fleet, "h200-all") == "h200-reserved-1"


def test_an_unknown_pool_is_refused(fleet: DevCluster) -> None:
    reply = _register(fleet, "nowhere", pool="gpu")
    assert reply.status_code == 500 and 'job "nowhere" is in nonexistent node pool "gpu"' in reply.text


@pytest.mark.parametrize(("datacenters", "node"), [
    pytest.param(None, "n1", id="default-star"),
    pytest.param(["dc2"], "n3", id="exact"),
    pytest.param(["d*2"], "n3", id="glob"),
])
def test_datacenters_match_by_glob(make_cluster: ClusterFactory, datacenters: list[str] | None, node: str) -> None:
    cluster = make_cluster(TWO_NODES)
    assert _register(cluster, "dc", datacenters=datacenters, gpus=2).status_code == 200
    if node == "n1":
        assert _node_name(cluster, "dc") in ("n1", "n2", "n3")
    else:
        assert _node_name(cluster, "dc") == node


def test_only_star_is_a_wildcard(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    _register(cluster, "question", datacenters=["dc?"])
    _register(cluster, "bracket", datacenters=["dc[12]"])
    assert job_allocs(cluster.audit(), "question") == job_allocs(cluster.audit(), "bracket") == []
