"""A device instance turns unhealthy mid-run (devicehealth.py): the fingerprint says so, a
`NodeRegistration` event carries it (client/client.go `updateNodeFromDevices`, nomad/state/events.go),
the scheduler skips the instance ("Skip unhealthy devices as they aren't allocatable",
scheduler/feasible/device.go `newDeviceAllocator`, nomad/structs/devices.go `NewDeviceAccounter`, v2.0.5),
the allocation already on it runs on, and a job pinned to it waits blocked until it is healthy again."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _instances(cluster: DevCluster, node_id: str) -> dict[str, dict[str, Any]]:
    node = requests.get(f"{cluster.url}/v1/node/{node_id}", timeout=5).json()
    return {i["ID"]: i for group in node["NodeResources"]["Devices"] for i in group["Instances"]}


def _fault(cluster: DevCluster, node_id: str, device: str, what: str, **params: str) -> requests.Response:
    return requests.post(f"{cluster.url}/_dev/node/{node_id}/device/{device}/{what}", params=params, timeout=5)


def test_unhealthy_instance_is_in_the_fingerprint_and_a_node_event(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    node_id = cluster.node_ids()["n1"]
    gpu = sorted(_instances(cluster, node_id))[0]
    reader = StreamReader(cluster.url, [("topic", "Node")])
    reply = _fault(cluster, node_id, gpu, "unhealthy", description="XID 79: GPU has fallen off the bus")
    assert reply.status_code == 200
    assert reply.json() == {"NodeID": node_id, "ID": gpu, "Healthy": False,
                            "HealthDescription": "XID 79: GPU has fallen off the bus"}
    shown = _instances(cluster, node_id)[gpu]
    assert (shown["Healthy"], shown["HealthDescription"]) == (False, "XID 79: GPU has fallen off the bus")
    event = reader.wait_for(lambda e: e["Type"] == "NodeRegistration" and e["Key"] == node_id
                            and any(not i["Healthy"] for g in e["Payload"]["Node"]["NodeResources"]["Devices"]
                                    for i in g["Instances"]))
    assert event["Topic"] == "Node"
    assert _fault(cluster, node_id, gpu, "healthy").json()["Healthy"] is True
    assert _instances(cluster, node_id)[gpu] | {"Locality": None} == {
        "ID": gpu, "Healthy": True, "HealthDescription": "", "Locality": None}
    spells = requests.get(f"{cluster.url}/_dev/audit", timeout=5).json()["device_health"]
    assert [(s["device_id"], s["healthy_at"] is not None) for s in spells] == [(gpu, True)]
    reader.close()


def test_unknown_node_or_instance_is_404(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    node_id = cluster.node_ids()["n1"]
    assert _fault(cluster, "nope", "GPU-x", "unhealthy").status_code == 404
    assert _fault(cluster, node_id, "GPU-not-here", "unhealthy").status_code == 404


def test_running_allocation_stays_and_a_pinned_job_waits_until_healthy(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    node_id = cluster.node_ids()["n1"]
    first, second = sorted(_instances(cluster, node_id))
    submit(client, jobspec("running", gpus=1, node=node_id, pin=[first], duration=3600))
    wait_until(lambda: [a for a in job_allocs(cluster.audit(), "running") if a["client_status"] == "running"])
    cluster.device_unhealthy("n1", first)
    cluster.device_unhealthy("n1", second)
    # the running allocation is left alone: nothing in the servers stops it
    (running,) = job_allocs(cluster.audit(), "running")
    assert (running["client_status"], running["desired_status"]) == ("running", "run")

    submit(client, jobspec("pinned", gpus=1, node=node_id, pin=[second], duration=3600))
    blocked = wait_until(lambda: [e for e in client.job.get_evaluations("pinned") if e["Status"] == "blocked"])
    metric = blocked[0]["FailedTGAllocs"]["main"]
    assert metric["DimensionExhausted"] == {"devices: no devices match request": 1}
    assert job_allocs(cluster.audit(), "pinned") == []
    assert cluster.audit()["double_bookings_refused"] == 0  # an unhealthy instance is not a held one

    cluster.device_healthy("n1", second)
    (placed,) = wait_until(lambda: job_allocs(cluster.audit(), "pinned"))
    assert placed["device_ids"] == [second]


def test_a_device_healed_during_an_election_unblocks_nothing_until_a_leader_is_elected(
        make_cluster: ClusterFactory) -> None:
    """The client's node update (`watchNodeUpdates` -> `retryRegisterNode` -> `Node.Register`, client/client.go
    v2.0.5) is a write the servers commit only with a leader (election.py): a device healed while there is
    none unblocks no evaluation until one is elected. The chaos run saw a refused job placed mid-election,
    while the stop sent for it was refused "No cluster leader"."""
    cluster = make_cluster(TWO_NODES, rpc_hold_s=0.2)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    node_id = cluster.node_ids()["n1"]
    gpu = sorted(_instances(cluster, node_id))[0]
    cluster.device_unhealthy("n1", gpu)
    submit(client, jobspec("pinned", gpus=1, node=node_id, pin=[gpu], duration=3600))
    wait_until(lambda: [e for e in client.job.get_evaluations("pinned") if e["Status"] == "blocked"])
    cluster.set_leader(False)
    cluster.device_healthy("n1", gpu)
    assert job_allocs(cluster.audit(), "pinned") == []
    stale = requests.get(f"{cluster.url}/v1/node/{node_id}?stale", timeout=5).json()
    shown = {i["ID"]: i for g in stale["NodeResources"]["Devices"] for i in g["Instances"]}
    assert shown[gpu]["Healthy"] is False  # the servers still hold the fingerprint they last committed
    cluster.set_leader(True)
    (placed,) = wait_until(lambda: job_allocs(cluster.audit(), "pinned"))
    assert placed["device_ids"] == [gpu]
