"""ACLs as Nomad refuses them (acl.py): 403 bodies, namespace policies and globs, `namespace=*` lists
kept to the readable namespaces, and the event stream's refusal, which from 1.11.2 is `200 OK` and an
end before the first heartbeat (`command/agent/event_endpoint.go` `EventStream`, v2.0.5)."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.acl import AclToken

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, jobspec, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster

ADMIN = AclToken("admin", management=True)
SERVICE = AclToken("svc", {"ml": ("write",), "*": ("read",)}, node="read")
ML_ONLY = AclToken("ml-only", {"ml": ("write",)}, node="read")
TOKENS = (ADMIN, SERVICE, ML_ONLY)


def _cluster(make_cluster: ClusterFactory, version: str = "2.0.5") -> DevCluster:
    return make_cluster({**TWO_NODES, "namespaces": ["ml"]}, acl_tokens=TOKENS, nomad_version=version)


def _get(cluster: DevCluster, path: str, token: str | None, **params: str) -> requests.Response:
    headers = {"X-Nomad-Token": token} if token else {}
    return requests.get(f"{cluster.url}{path}", params=params, headers=headers, timeout=5)


def _register(cluster: DevCluster, token: str, namespace: str) -> requests.Response:
    job = dict(nomad.Nomad(address=cluster.url, timeout=5, token="admin").jobs.parse(
        jobspec(f"j-{namespace}", duration=3600), canonicalize=True))
    return requests.post(f"{cluster.url}/v1/jobs", json={"Job": job}, params={"namespace": namespace},
                         headers={"X-Nomad-Token": token}, timeout=5)


def test_refusals_read_as_nomad_writes_them(make_cluster: ClusterFactory) -> None:
    cluster = _cluster(make_cluster)
    assert (_get(cluster, "/v1/nodes", None).status_code, _get(cluster, "/v1/nodes", None).text) == (
        403, "Permission denied")
    assert _get(cluster, "/v1/nodes", "nope").text == "ACL token not found"
    assert _get(cluster, "/v1/nodes", "svc").status_code == 200
    assert _register(cluster, "svc", "default").text == "Permission denied"  # read only there (the `*` glob)
    assert _register(cluster, "svc", "ml").status_code == 200
    assert _register(cluster, "admin", "default").status_code == 200
    assert _get(cluster, "/v1/job/j-default", "ml-only").status_code == 403
    assert _get(cluster, "/v1/job/j-default", "svc").status_code == 200
    everywhere = _get(cluster, "/v1/jobs", "ml-only", namespace="*").json()
    assert {j["Namespace"] for j in everywhere} == {"ml"}, "a * list keeps the readable namespaces"
    wait_until(lambda: len(_get(cluster, "/v1/allocations", "admin", namespace="*").json()) == 2)
    assert {a["Namespace"] for a in _get(cluster, "/v1/allocations", "ml-only", namespace="*").json()} == {"ml"}
    assert [n["Name"] for n in _get(cluster, "/v1/namespaces", "ml-only").json()] == ["ml"]
    alloc = _get(cluster, "/v1/allocations", "admin", namespace="default").json()[0]["ID"]
    logs = _get(cluster, f"/v1/client/fs/logs/{alloc}", "svc", task="work", type="stdout")
    assert (logs.status_code, logs.text) == (403, "Permission denied"), "read-logs is a write capability"


@pytest.mark.parametrize("token", ["ml-only", None, "nope"])
def test_a_2x_stream_refusal_is_200_then_an_end_with_no_heartbeat(make_cluster: ClusterFactory,
                                                                    token: str | None) -> None:
    cluster = _cluster(make_cluster)
    params = [("topic", "Allocation"), ("topic", "Node"), ("namespace", "*")]
    reader = StreamReader(cluster.url, params) if token is None else _reader(cluster, params, token)
    try:
        assert reader.status == 200
        assert reader.ended.wait(5), "the connection is closed at once"
        assert reader.lines == [] and reader.trailer == b""
    finally:
        reader.close()


def test_a_stream_the_token_may_read_gets_its_heartbeat(make_cluster: ClusterFactory) -> None:
    cluster = _cluster(make_cluster)
    reader = _reader(cluster, [("topic", "Allocation"), ("topic", "Node"), ("namespace", "*")], "svc")
    try:
        wait_until(lambda: reader.heartbeats, what="the first heartbeat")
    finally:
        reader.close()


def test_a_1x_stream_refusal_is_a_403(make_cluster: ClusterFactory) -> None:
    cluster = _cluster(make_cluster, "1.10.5")
    r = requests.get(f"{cluster.url}/v1/event/stream", params={"topic": "Allocation", "namespace": "*"},
                     headers={"X-Nomad-Token": "ml-only"}, timeout=5)
    assert (r.status_code, r.text) == (403, "Permission denied")


def _reader(cluster: DevCluster, params: list[tuple[str, str]], token: str) -> StreamReader:
    return StreamReader(cluster.url, [*params], headers={"X-Nomad-Token": token})


def test_parse_needs_parse_job_or_submit_job(make_cluster: ClusterFactory) -> None:
    tokens = (*TOKENS, AclToken("submit-only", {"default": ("submit-job",)}),
              AclToken("list-only", {"default": ("list-jobs",)}))
    cluster = make_cluster({**TWO_NODES, "namespaces": ["ml"]}, acl_tokens=tokens)
    body = {"JobHCL": jobspec("p"), "Canonicalize": True}
    for token, status in (("submit-only", 200), ("svc", 200), ("list-only", 403)):
        r = requests.post(f"{cluster.url}/v1/jobs/parse", json=body, headers={"X-Nomad-Token": token}, timeout=5)
        assert r.status_code == status, (token, r.text)
