"""Namespaces as Nomad applies them: the register's namespace (`namespaceForJob`,
`command/agent/job_endpoint.go` v2.0.5), unknown namespaces refused (`nomad/job_endpoint_validators.go`),
reads, listings and the event stream per namespace, and a deregister in the wrong namespace that is a
200 doing nothing (`nomad/job_endpoint.go` Deregister, job == nil)."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


@pytest.fixture
def spaced(make_cluster: ClusterFactory) -> DevCluster:
    return make_cluster({**TWO_NODES, "namespaces": ["ml", "research"]})


def _job(cluster: DevCluster, job_id: str, namespace: str | None = None, **options: Any) -> dict[str, Any]:
    client = nomad.Nomad(address=cluster.url, timeout=5)
    job = dict(client.jobs.parse(jobspec(job_id, duration=3600, **options), canonicalize=True))
    if namespace is not None:
        job["Namespace"] = namespace
    return job


def _post(cluster: DevCluster, body: dict[str, Any], **params: str) -> requests.Response:
    return requests.post(f"{cluster.url}/v1/jobs", json=body, params=params, timeout=5)


def _status(cluster: DevCluster, job_id: str, namespace: str) -> int:
    return requests.get(f"{cluster.url}/v1/job/{job_id}", params={"namespace": namespace}, timeout=5).status_code


def test_the_jobs_own_namespace_is_used_without_a_query(spaced: DevCluster) -> None:
    assert _post(spaced, {"Job": _job(spaced, "own", "ml")}).status_code == 200
    assert (_status(spaced, "own", "ml"), _status(spaced, "own", "default")) == (200, 404)
    assert requests.get(f"{spaced.url}/v1/job/own", timeout=5).status_code == 404  # no query: default


def test_the_query_parameter_wins_over_the_jobs_namespace(spaced: DevCluster) -> None:
    assert _post(spaced, {"Job": _job(spaced, "moved", "ml")}, namespace="research").status_code == 200
    assert (_status(spaced, "moved", "research"), _status(spaced, "moved", "ml")) == (200, 404)
    job = requests.get(f"{spaced.url}/v1/job/moved", params={"namespace": "research"}, timeout=5).json()
    assert job["Namespace"] == "research"
    # The body's WriteRequest namespace comes between the two.
    assert _post(spaced, {"Job": _job(spaced, "body", "ml"), "Namespace": "research"}).status_code == 200
    assert _status(spaced, "body", "research") == 200
    # python-nomad sends ?namespace= from its own setting.
    client = nomad.Nomad(address=spaced.url, timeout=5, namespace="ml")
    client.jobs.register_job({"Job": _job(spaced, "python", "research")})
    assert (_status(spaced, "python", "ml"), _status(spaced, "python", "research")) == (200, 404)


@pytest.mark.parametrize(("job_namespace", "params"), [("nope", {}), ("ml", {"namespace": "nope"})])
def test_an_unknown_namespace_is_refused(spaced: DevCluster, job_namespace: str, params: dict[str, str]) -> None:
    reply = _post(spaced, {"Job": _job(spaced, "lost", job_namespace)}, **params)
    assert reply.status_code == 500
    assert 'job "lost" is in nonexistent namespace "nope"' in reply.text
    assert spaced.audit()["jobs"] == []


def test_the_default_cluster_knows_only_default(seed: DevCluster) -> None:
    assert [n["Name"] for n in requests.get(f"{seed.url}/v1/namespaces", timeout=5).json()] == ["default"]
    reply = _post(seed, {"Job": _job(seed, "elsewhere", "ml")})
    assert reply.status_code == 500 and "nonexistent namespace" in reply.text


def test_listings_and_streams_filter_by_namespace(spaced: DevCluster) -> None:
    everything = StreamReader(spaced.url, [("topic", "Job"), ("namespace", "*")])
    default = StreamReader(spaced.url, [("topic", "Job")])
    ml = StreamReader(spaced.url, [("topic", "Job"), ("namespace", "ml")])
    _post(spaced, {"Job": _job(spaced, "a", "default")})
    _post(spaced, {"Job": _job(spaced, "b", "ml")})
    wait_until(lambda: len(everything.events) == 2, what="both jobs on the * stream")
    wait_until(lambda: default.events and ml.events)
    assert [e["Key"] for e in default.events] == ["a"] and [e["Key"] for e in ml.events] == ["b"]
    wait_until(lambda: len(job_allocs(spaced.audit(), "a")) == len(job_allocs(spaced.audit(), "b")) == 1)

    def listed(path: str, namespace: str | None) -> list[str]:
        params = {} if namespace is None else {"namespace": namespace}
        return sorted(item["JobID" if "JobID" in item else "ID"]
                      for item in requests.get(f"{spaced.url}{path}", params=params, timeout=5).json())

    assert listed("/v1/jobs", None) == ["a"] and listed("/v1/jobs", "ml") == ["b"]
    assert listed("/v1/jobs", "*") == ["a", "b"]
    assert listed("/v1/allocations", None) == ["a"] and listed("/v1/allocations", "*") == ["a", "b"]
    assert listed("/v1/allocations", "research") == []
    for reader in (everything, default, ml):
        reader.close()


def test_deregister_in_the_wrong_namespace_is_200_and_does_nothing(spaced: DevCluster) -> None:
    _post(spaced, {"Job": _job(spaced, "kept", "ml", gpus=1)})
    wait_until(lambda: [a for a in job_allocs(spaced.audit(), "kept") if a["client_status"] == "running"])
    reply = requests.delete(f"{spaced.url}/v1/job/kept", timeout=5)  # default namespace
    assert reply.status_code == 200 and reply.json()["EvalID"] == ""
    job = requests.get(f"{spaced.url}/v1/job/kept", params={"namespace": "ml"}, timeout=5).json()
    assert (job["Stop"], job["Status"]) == (False, "running")
    stopped = requests.delete(f"{spaced.url}/v1/job/kept", params={"namespace": "ml"}, timeout=5).json()
    assert stopped["EvalID"]
    wait_until(lambda: [a["client_status"] for a in job_allocs(spaced.audit(), "kept")] == ["complete"],
               what="the stopped allocation's kill_timeout")
