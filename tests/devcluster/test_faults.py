"""Fault injection and the audit: node down/up/drain over HTTP and Python, lost allocations,
replacement, and the audit record of every allocation."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, alloc_events, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def test_node_down_makes_allocations_lost_and_frees_devices(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url)
    ids = cluster.node_ids()
    reader = StreamReader(cluster.url, [("topic", "Allocation"), ("topic", "Node")])
    submit(client, jobspec("victim", gpus=2, node=ids["n1"], duration=3600))
    reader.wait_for(lambda e: e["Type"] == "AllocationUpdated")

    reply = requests.post(f"{cluster.url}/_dev/node/{ids['n1']}/down", timeout=5)
    assert reply.json()["Status"] == "down"
    lost = reader.wait_for(lambda e: e["Topic"] == "Allocation"
                           and e["Payload"]["Allocation"]["ClientStatus"] == "lost")
    assert lost["Type"] == "AllocationUpdated"
    assert lost["Payload"]["Allocation"]["DesiredStatus"] == "stop"
    node_event = reader.wait_for(lambda e: e["Type"] == "NodeStreamEvent")
    assert node_event["Payload"]["Node"]["Status"] == "down" and node_event["Namespace"] == ""
    assert client.node.get_node(ids["n1"])["Status"] == "down"
    assert cluster.state.ledger.held() == {}

    # Nomad replaces a lost allocation; pinned to a down node, the replacement waits.
    audit = cluster.audit()
    assert [a["client_status"] for a in job_allocs(audit, "victim")] == ["lost"]
    assert [p["job_id"] for p in audit["pending"]] == ["victim"]
    cluster.node_up("n1")  # by name works too
    replacement = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "victim")
                                      if a["client_status"] == "running"])
    assert replacement[0]["node_id"] == ids["n1"]
    assert alloc_events(reader, "victim")[:3] == [("PlanResult", "pending"), ("AllocationUpdated", "running"),
                                                  ("AllocationUpdated", "lost")]
    reader.close()


def test_drain_and_eligibility_keep_new_work_off_the_node(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url)
    ids = cluster.node_ids()
    reader = StreamReader(cluster.url, [("topic", "Node")])
    submit(client, jobspec("runner", gpus=1, node=ids["n1"], duration=3600))
    requests.post(f"{cluster.url}/_dev/node/{ids['n1']}/drain", timeout=5)
    node = client.node.get_node(ids["n1"])
    assert node["Drain"] is True and node["DrainStrategy"] is not None
    assert node["SchedulingEligibility"] == "ineligible"
    assert reader.wait_for(lambda e: e["Type"] == "NodeDrain")["Payload"]["Node"]["Drain"] is True
    # Running work keeps running; new work pinned there waits.
    assert job_allocs(cluster.audit(), "runner")[0]["client_status"] in ("pending", "running")
    submit(client, jobspec("blocked", gpus=1, node=ids["n1"], duration=0.001))
    assert job_allocs(cluster.audit(), "blocked") == []
    reasons = cluster.audit()["pending"][0]["reasons"]
    assert reasons == {"node ineligible": 1, "constraint ${node.unique.id} = " + ids["n1"]: 1,
                       "missing compatible datacenter": 1}
    cluster.node_undrain(ids["n1"])
    wait_until(lambda: job_allocs(cluster.audit(), "blocked"))

    cluster.set_eligibility("n2", False)
    assert reader.wait_for(lambda e: e["Type"] == "NodeEligibility")["Payload"]["Node"]["SchedulingEligibility"] == (
        "ineligible")
    reader.close()


def test_unknown_node_fault_is_404(seed: DevCluster) -> None:
    reply = requests.post(f"{seed.url}/_dev/node/nope/down", timeout=5)
    assert (reply.status_code, reply.text) == (404, "node not found")


def test_audit_records_every_allocation(seed: DevCluster, client: nomad.Nomad) -> None:
    before = seed.audit()
    assert before["speed"] == 1000.0 and before["allocations"] == []
    submit(client, jobspec("audited", gpus=3, duration=2.0))  # 2 s of task time = 2 ms at speed 1000
    submit(client, jobspec("failing", duration=0.001, fail=True))
    wait_until(lambda: all(a["terminal_event_at"] for a in seed.audit()["allocations"]) and
               len(seed.audit()["allocations"]) == 2)
    audit = requests.get(f"{seed.url}/_dev/audit", timeout=5).json()
    (done,) = job_allocs(audit, "audited")
    assert set(done) >= {"alloc_id", "job_id", "task_group", "node_id", "device_ids", "share_gpu", "share_milli",
                         "registered_at", "created_at", "started_at", "finished_at", "terminal_event_at",
                         "client_status"}
    assert (done["client_status"], done["task_group"], len(done["device_ids"])) == ("complete", "main", 3)
    assert done["node_id"] == seed.node_ids()["gpu-a800-1"]
    assert done["share_gpu"] is None and done["share_milli"] is None
    assert done["registered_at"] <= done["created_at"] <= done["started_at"] <= done["finished_at"]
    assert done["finished_at"] <= done["terminal_event_at"]
    assert done["finished_at"] - done["started_at"] >= 2.0 / 1000
    assert job_allocs(audit, "failing")[0]["client_status"] == "failed"
    registered = {j["job_id"]: j["registered_at"] for j in audit["jobs"]}
    assert registered["audited"] == [done["registered_at"]]
    assert (audit["double_bookings_refused"], audit["share_oversubscriptions"]) == (0, 0)


def test_client_hang_up_unsubscribes(seed: DevCluster) -> None:
    reader = StreamReader(seed.url, [("topic", "Node")])
    wait_until(lambda: seed.broker.subscriber_count == 1)
    reader.close()
    wait_until(lambda: seed.broker.subscriber_count == 0, what="the server to notice the hang-up")
