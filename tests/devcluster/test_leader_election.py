"""Leader elections (election.py): what Nomad's API answers while its servers have no leader.

Sources, v2.0.5 (the same at v1.10.5): `forward` and `getLeaderForRPC` in nomad/rpc.go (writes and
non-stale reads held up to `RPCHoldTimeout`, 5 s in nomad/config.go, then `structs.ErrNoLeader`, "No
cluster leader", nomad/structs/errors.go), `errCodeFromHandler` in command/agent/http.go (a plain 500),
`Status.Leader` in nomad/status_endpoint.go (forwarded like any read), `setQueryMeta` in nomad/rpc.go
(stale reads: `KnownLeader` false), `Event.stream` in nomad/event_endpoint.go (no leader needed).
"""

from __future__ import annotations

import time

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`

# Every call the service makes that needs the leader: writes, and reads without `?stale`.
GATED = [
    ("GET", "/v1/nodes"), ("GET", "/v1/jobs"), ("GET", "/v1/job/j"), ("GET", "/v1/job/j/allocations"),
    ("GET", "/v1/job/j/summary"), ("GET", "/v1/job/j/submission"), ("GET", "/v1/job/j/evaluations"),
    ("GET", "/v1/allocations"), ("GET", "/v1/evaluations"), ("GET", "/v1/namespaces"),
    ("GET", "/v1/status/leader"), ("POST", "/v1/jobs"), ("POST", "/v1/job/j"), ("DELETE", "/v1/job/j"),
    ("PUT", "/v1/system/gc"),
]


@pytest.fixture
def held(make_cluster: ClusterFactory) -> DevCluster:
    """A cluster whose requests wait 0.2 s for a leader instead of Nomad's 5 s."""
    return make_cluster(rpc_hold_s=0.2)


@pytest.mark.parametrize(("method", "path"), GATED, ids=[f"{m} {p}" for m, p in GATED])
def test_an_election_answers_writes_and_default_reads_500_no_cluster_leader(
        held: DevCluster, method: str, path: str) -> None:
    held.set_leader(False)
    reply = requests.request(method, f"{held.url}{path}", json={}, timeout=5)
    assert (reply.status_code, reply.text) == (500, "No cluster leader")
    assert reply.headers["content-type"].startswith("text/plain")


def test_the_fault_is_a_dev_route_with_a_window(held: DevCluster) -> None:
    started = requests.post(f"{held.url}/_dev/election", params={"seconds": 60}, timeout=5)
    assert started.status_code == 200 and started.json()["leader"] is False
    assert requests.get(f"{held.url}/v1/jobs", timeout=5).status_code == 500
    requests.post(f"{held.url}/_dev/election/end", timeout=5)
    assert requests.get(f"{held.url}/v1/jobs", timeout=5).status_code == 200
    elections = requests.get(f"{held.url}/_dev/audit", timeout=5).json()["elections"]
    assert elections["refused"] == 1 and len(elections["windows"]) == 1
    assert requests.post(f"{held.url}/_dev/election", params={"seconds": -1}, timeout=5).status_code == 400


def test_stale_reads_answer_without_a_leader(held: DevCluster) -> None:
    held.set_leader(False)
    leader = requests.get(f"{held.url}/v1/status/leader", params={"stale": "true"}, timeout=5)
    assert (leader.status_code, leader.json()) == (200, "")
    nodes = requests.get(f"{held.url}/v1/nodes?stale", timeout=5)
    assert nodes.status_code == 200 and len(nodes.json()) == 1
    assert nodes.headers["X-Nomad-KnownLeader"] == "false"
    bad = requests.get(f"{held.url}/v1/nodes", params={"stale": "maybe"}, timeout=5)
    assert (bad.status_code, bad.text) == (400, "Expect `true` or `false` for `stale` query string parameter")


def test_what_needs_no_leader_still_answers(held: DevCluster) -> None:
    reader = StreamReader(held.url, [("topic", "Job")])
    wait_until(lambda: reader.heartbeats >= 1)
    held.set_leader(False)
    parsed = requests.post(f"{held.url}/v1/jobs/parse", json={"JobHCL": jobspec("p")}, timeout=5)
    assert parsed.status_code == 200
    assert requests.get(f"{held.url}/v1/agent/members", timeout=5).status_code == 200
    assert not reader.ended.wait(0.5)  # the stream stays open through the election
    reader.close()


def test_a_request_held_while_a_leader_is_elected_is_answered(seed: DevCluster) -> None:
    seed.election(0.5)  # shorter than the 5 s hold: the request never sees the election
    reply = requests.get(f"{seed.url}/v1/jobs", timeout=10)
    assert reply.status_code == 200 and seed.audit()["elections"]["held"] == 1


def test_nothing_is_committed_during_an_election(make_cluster: ClusterFactory) -> None:
    dc = make_cluster(speed=1.0, rpc_hold_s=0.2)
    client = nomad.Nomad(address=dc.url, timeout=5)
    submit(client, jobspec("short", gpus=1, duration=1))
    wait_until(lambda: any(a["client_status"] == "running" for a in job_allocs(dc.audit(), "short")))
    dc.election(60)
    time.sleep(1.5)  # the task's second passes inside the window: its end is not committed
    assert [a["client_status"] for a in job_allocs(dc.audit(), "short")] == ["running"]
    dc.end_election()
    wait_until(lambda: [a["client_status"] for a in job_allocs(dc.audit(), "short")] == ["complete"])
