"""Namespaces created and deleted at run time (`command/agent/namespace_endpoint.go`, v2.0.5), and a
stream subscribed to `*` that never sees a namespace created after it subscribed
(`nomad/event_endpoint.go` `validateACL`: "Namespaces is set once")."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster


def _create(cluster: DevCluster, name: str, body_name: str | None = None) -> requests.Response:
    return requests.post(f"{cluster.url}/v1/namespace/{name}", json={"Name": body_name or name}, timeout=5)


def _register(cluster: DevCluster, job_id: str, namespace: str) -> requests.Response:
    client = nomad.Nomad(address=cluster.url, timeout=5)
    from .helpers import jobspec
    job = dict(client.jobs.parse(jobspec(job_id, duration=3600), canonicalize=True))
    return requests.post(f"{cluster.url}/v1/jobs", json={"Job": job}, params={"namespace": namespace}, timeout=5)


def test_create_list_get_and_delete(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    created = _create(cluster, "late")
    assert created.status_code == 200 and created.json() is None
    index = int(created.headers["X-Nomad-Index"])
    listing = requests.get(f"{cluster.url}/v1/namespaces", timeout=5)
    assert [n["Name"] for n in listing.json()] == ["default", "late"]
    assert int(listing.headers["X-Nomad-Index"]) == index
    assert requests.get(f"{cluster.url}/v1/namespace/late", timeout=5).json()["CreateIndex"] == index
    assert _create(cluster, "late", "other").text == "Namespace name does not match request path"
    assert _create(cluster, "bad_name").status_code == 500
    refused = requests.delete(f"{cluster.url}/v1/namespace/default", timeout=5)
    assert (refused.status_code, refused.text) == (500, "can not delete default namespace")
    assert _register(cluster, "busy", "late").status_code == 200
    busy = requests.delete(f"{cluster.url}/v1/namespace/late", timeout=5)
    assert busy.status_code == 500 and 'namespace "late" has non-terminal jobs' in busy.text
    requests.delete(f"{cluster.url}/v1/job/busy", params={"namespace": "late"}, timeout=5)
    wait_until(lambda: requests.delete(f"{cluster.url}/v1/namespace/late", timeout=5).status_code == 200,
               what="the namespace to be deletable once its job is stopped")
    assert requests.get(f"{cluster.url}/v1/namespace/late", timeout=5).status_code == 404


def test_a_wildcard_stream_does_not_see_a_namespace_created_after_it_subscribed(
        make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES, speed=1.0)
    early = StreamReader(cluster.url, [("topic", "Job"), ("namespace", "*")])
    try:
        wait_until(lambda: early.heartbeats, what="the first heartbeat")
        assert _create(cluster, "late").status_code == 200
        late = StreamReader(cluster.url, [("topic", "Job"), ("namespace", "*")])
        try:
            wait_until(lambda: late.heartbeats, what="the second stream's heartbeat")
            assert _register(cluster, "in-late", "late").status_code == 200
            assert _register(cluster, "in-default", "default").status_code == 200
            late.wait_for(lambda e: e["Key"] == "in-default", what="the default job on the new stream")
            early.wait_for(lambda e: e["Key"] == "in-default", what="the default job on the old stream")
            assert any(e["Key"] == "in-late" for e in late.events)
            assert not any(e["Key"] == "in-late" for e in early.events)
        finally:
            late.close()
    finally:
        early.close()


@pytest.mark.parametrize(("field", "config", "what"), [
    pytest.param("NodePoolConfiguration", {"Default": "reserved"}, "node pool configuration: Node Pools Governance",
                 id="node-pool-default"),
    pytest.param("NodePoolConfiguration", {}, "node pool configuration: Node Pools Governance", id="node-pool-empty"),
    pytest.param("VaultConfiguration", {"Default": "v"}, "vault configuration: Multi-Cluster Vault", id="vault"),
    pytest.param("ConsulConfiguration", {"Default": "c"}, "consul configuration: Multi-Cluster Consul", id="consul"),
])
def test_a_namespace_default_pool_is_enterprise_only(make_cluster: ClusterFactory, field: str,
                                                     config: dict[str, str], what: str) -> None:
    """Issue 31, item 1: Nomad CE refuses a namespace's node pool configuration (`Namespace.Validate`,
    nomad/structs/structs.go; structs_ce.go "unlicensed", v2.0.5 and v1.10.5), so no namespace there
    has a default pool and a job without one is in `default` (job_endpoint_hook_node_pool_ce.go)."""
    cluster = make_cluster(TWO_NODES)
    r = requests.post(f"{cluster.url}/v1/namespace/gpu", json={"Name": "gpu", field: config}, timeout=5)
    assert (r.status_code, r.text) == (500, f'Invalid namespace "gpu": 1 error occurred:\n\t* invalid {what} is '
                                            "unlicensed.\n\n")
    assert requests.get(f"{cluster.url}/v1/namespace/gpu", timeout=5).status_code == 404
    assert requests.post(f"{cluster.url}/v1/namespace/gpu", json={"Name": "gpu", field: None},
                         timeout=5).status_code == 200
    assert requests.get(f"{cluster.url}/v1/namespace/gpu", timeout=5).json()[field] is None
    assert _register(cluster, "no-pool", "gpu").status_code == 200
    job = requests.get(f"{cluster.url}/v1/job/no-pool", params={"namespace": "gpu"}, timeout=5).json()
    assert job["NodePool"] == "default"
