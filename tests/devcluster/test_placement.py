"""Placement through the HTTP API: pins, refusals, binpacking, blocked jobs, device-group rules."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import CLUSTERS, TWO_NODES, ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _instances(cluster: DevCluster, node: str, group: int = 0) -> list[str]:
    node_json = requests.get(f"{cluster.url}/v1/node/{cluster.node_ids()[node]}").json()
    return [i["ID"] for i in node_json["NodeResources"]["Devices"][group]["Instances"]]


def _allocation(cluster: DevCluster, job_id: str) -> dict[str, Any]:
    (stub,) = requests.get(f"{cluster.url}/v1/job/{job_id}/allocations").json()
    return dict(requests.get(f"{cluster.url}/v1/allocation/{stub['ID']}").json())


def _devices(alloc: dict[str, Any]) -> list[str]:
    return [i for task in alloc["AllocatedResources"]["Tasks"].values() for d in task["Devices"] or []
            for i in d["DeviceIDs"]]


def test_node_and_device_pin_lands_on_exactly_those_ids(seed: DevCluster, client: nomad.Nomad) -> None:
    node_id = seed.node_ids()["gpu-a800-1"]
    wanted = _instances(seed, "gpu-a800-1")[5:7]
    submit(client, jobspec("pinned", gpus=2, node=node_id, pin=wanted, duration=3600))
    alloc = _allocation(seed, "pinned")
    assert alloc["NodeID"] == node_id
    (device,) = alloc["AllocatedResources"]["Tasks"]["work"]["Devices"]
    assert (device["Vendor"], device["Type"], device["Name"]) == ("nvidia", "gpu", "NVIDIA A800-SXM4-80GB")
    assert sorted(device["DeviceIDs"]) == sorted(wanted)
    assert sorted(job_allocs(seed.audit(), "pinned")[0]["device_ids"]) == sorted(wanted)


def test_set_contains_pins_too(seed: DevCluster, client: nomad.Nomad) -> None:
    wanted = _instances(seed, "gpu-a800-1")[2:4]
    submit(client, jobspec("pinned-all", gpus=2, pin=wanted, pin_operator="set_contains", duration=3600))
    assert sorted(_devices(_allocation(seed, "pinned-all"))) == sorted(wanted)


def test_pin_to_taken_instances_is_refused_counted_and_retried(seed: DevCluster, client: nomad.Nomad) -> None:
    node_id = seed.node_ids()["gpu-a800-1"]
    taken = _instances(seed, "gpu-a800-1")[:2]
    submit(client, jobspec("holder", gpus=2, node=node_id, pin=taken, duration=3600))
    submit(client, jobspec("intruder", gpus=1, node=node_id, pin=taken[1:], duration=0.001))

    audit = seed.audit()
    assert audit["double_bookings_refused"] == 1
    assert job_allocs(audit, "intruder") == []
    (pending,) = [p for p in audit["pending"] if p["job_id"] == "intruder"]
    assert "devices: no devices match request" in pending["reasons"]
    assert client.job.get_job("intruder")["Status"] == "pending"
    summary = client.job.get_summary("intruder")["Summary"]["main"]
    assert summary["Queued"] == 1

    # Re-registering the same pinned job is another refused attempt; freeing the instances places it.
    submit(client, jobspec("intruder", gpus=1, node=node_id, pin=taken[1:], duration=0.001))
    assert seed.audit()["double_bookings_refused"] == 2
    client.job.deregister_job("holder")
    placed = wait_until(lambda: job_allocs(seed.audit(), "intruder"))
    assert placed[0]["device_ids"] == taken[1:]
    assert seed.audit()["double_bookings_refused"] == 2


def test_unpinned_jobs_wait_for_capacity_without_counting_refusals(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("big", gpus=8, duration=3600))
    submit(client, jobspec("small", gpus=1, duration=0.001))
    audit = seed.audit()
    assert job_allocs(audit, "small") == [] and audit["double_bookings_refused"] == 0
    (big,) = client.job.get_allocations("big")
    client.allocation.stop_allocation(big["ID"])
    small = wait_until(lambda: [a for a in job_allocs(seed.audit(), "small") if a["client_status"] == "complete"])
    # The stop migrates: a replacement of "big" is queued behind "small" (batch too, reconciler v2.0.5).
    big_audit, *replacement = job_allocs(seed.audit(), "big")
    assert small[0]["created_at"] >= big_audit["terminal_event_at"]
    assert all(r["created_at"] >= small[0]["created_at"] for r in replacement)


def test_allocation_listing_with_resources_and_filter(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("listed", gpus=2, duration=3600))
    submit(client, jobspec("other", duration=3600))
    plain = client.allocations.get_allocations()
    assert len(plain) == 2 and all("AllocatedResources" not in a for a in plain)
    (listed,) = client.allocations.get_allocations(resources=True, filter_='JobID == "listed"')
    assert len(listed["AllocatedResources"]["Tasks"]["work"]["Devices"][0]["DeviceIDs"]) == 2
    assert listed["Name"] == "listed.main[0]" and listed["JobType"] == "batch"
    assert requests.get(f"{seed.url}/v1/allocations", params={"filter": "JobID matches x"}).status_code == 400
    node_allocs = requests.get(f"{seed.url}/v1/node/{seed.node_ids()['gpu-a800-1']}/allocations").json()
    assert {a["JobID"] for a in node_allocs} == {"listed", "other"} and node_allocs[0]["Job"] is not None


def test_binpacking_and_datacenters(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url)
    for name in ("b1", "b2", "b3", "b4"):
        submit(client, jobspec(name, gpus=1, duration=3600))
    nodes = {name: job_allocs(cluster.audit(), name)[0]["node_id"] for name in ("b1", "b2", "b3", "b4")}
    ids = cluster.node_ids()
    assert nodes["b1"] == nodes["b2"]  # the first node is filled before the second is touched
    assert nodes["b3"] == nodes["b4"] != nodes["b1"]
    assert ids["n3"] not in nodes.values()  # dc2 is not in the job's datacenters
    submit(client, jobspec("b5", gpus=1, duration=3600))
    assert job_allocs(cluster.audit(), "b5") == []
    submit(client, jobspec("b6", gpus=1, duration=3600, datacenters=["dc2"]))
    assert job_allocs(cluster.audit(), "b6")[0]["node_id"] == ids["n3"]


def test_cpu_and_memory_must_fit(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("cpu-hog", cpu=9000, duration=0.001))
    submit(client, jobspec("mem-hog", memory=20000, duration=0.001))
    pending = {p["job_id"]: p["reasons"] for p in cluster.audit()["pending"]}
    assert pending["cpu-hog"] == {"resources exhausted: cpu": 2, "missing compatible datacenter": 1}
    assert "resources exhausted: memory" in pending["mem-hog"]


def test_one_request_is_filled_from_one_device_group(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster({"name": "mixed-node", "nodes": [{"name": "m", "gpus": [
        {"model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920},
        {"model": "NVIDIA H100 80GB HBM3", "memory_mib": 81920}]}]})
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("two", gpus=2, duration=0.001))
    assert job_allocs(cluster.audit(), "two") == []  # reference section 7: one group per request
    submit(client, jobspec("h100", gpus=1, device="nvidia/gpu/NVIDIA H100 80GB HBM3", duration=3600))
    assert _allocation(cluster, "h100")["AllocatedResources"]["Tasks"]["work"]["Devices"][0]["Name"] == (
        "NVIDIA H100 80GB HBM3")


def test_mig_requests_by_name_and_memory(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CLUSTERS / "mig-h100.yaml")
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("slice", gpus=1, device="nvidia/gpu/NVIDIA H100 80GB HBM3 MIG 3g.40gb", duration=3600))
    (device,) = _allocation(cluster, "slice")["AllocatedResources"]["Tasks"]["work"]["Devices"]
    assert device["Name"].endswith("MIG 3g.40gb") and device["DeviceIDs"][0].startswith("MIG-")
    # Only whole GPUs have 50 GiB; the 40 GiB slice is taken, so this must be a whole GPU.
    submit(client, jobspec("big-mem", gpus=1, duration=3600,
                           device_constraints=[("${device.attr.memory}", ">=", "50 GiB")]))
    assert _devices(_allocation(cluster, "big-mem"))[0].startswith("GPU-")
    submit(client, jobspec("small-mem", gpus=1, duration=3600,
                           device_constraints=[("${device.attr.memory}", "<", "15 GiB")]))
    assert _allocation(cluster, "small-mem")["AllocatedResources"]["Tasks"]["work"]["Devices"][0]["Name"].endswith(
        "MIG 1g.10gb")


def test_node_meta_and_class_constraints(shared_mixed: DevCluster) -> None:
    client = nomad.Nomad(address=shared_mixed.url)
    hcl = jobspec("meta-pin", duration=0.001).replace(
        'group "main" {', 'constraint {\n    attribute = "${meta.gpu_sharing}"\n    value = "time-slice"\n  }\n'
        '  group "main" {')
    submit(client, hcl)
    hcl = jobspec("class-pin", duration=0.001, datacenters=["dc1", "dc2"]).replace(
        'group "main" {', 'constraint {\n    attribute = "${node.class}"\n    value = "cpu"\n  }\n  group "main" {')
    submit(client, hcl)
    audit = shared_mixed.audit()
    ids = shared_mixed.node_ids()
    assert job_allocs(audit, "meta-pin")[0]["node_id"] == ids["shared-l40s-1"]
    assert job_allocs(audit, "class-pin")[0]["node_id"] == ids["cpu-1"]


STOCK_SHARED: dict[str, Any] = {
    "name": "stock-shared",
    "nodes": [{"name": "s1", "gpus": [{"model": "NVIDIA L40S", "count": 2, "memory_mib": 46068, "shared": True}]}],
}


def test_advisory_shares_are_not_refused_but_oversubscription_is_counted(make_cluster: ClusterFactory) -> None:
    """With the stock plugin a shared GPU is an ordinary device: shares reach it only by environment."""
    cluster = make_cluster(STOCK_SHARED)
    client = nomad.Nomad(address=cluster.url)
    node_id = cluster.node_ids()["s1"]
    gpu = _instances(cluster, "s1")[0]
    for name in ("share-a", "share-b", "share-c"):
        submit(client, jobspec(name, node=node_id, duration=3600, env={"NVIDIA_VISIBLE_DEVICES": gpu},
                               meta={"nomad_gpu_share_milli": "400"}))
    audit = cluster.audit()
    shares = [(a["share_gpu"], a["share_milli"]) for a in audit["allocations"]]
    assert shares == [(gpu, 400)] * 3
    assert audit["share_oversubscriptions"] == 1  # 400 + 400 + 400 > 1000, counted once
    assert audit["shared_gpus"] == {gpu: 1200}


def test_share_instances_are_devices_held_once(make_cluster: ClusterFactory) -> None:
    """The plugin's share instances are placed and held like any device: pinned twice, refused."""
    cluster = make_cluster(CLUSTERS / "mixed-fleet.yaml")
    client = nomad.Nomad(address=cluster.url)
    node_id = cluster.node_ids()["shared-l40s-1"]
    slots = _instances(cluster, "shared-l40s-1")
    gpu = slots[0].rpartition("-share-")[0]
    shared = "nomad-gpu/shared-gpu/NVIDIA L40S"
    submit(client, jobspec("half-a", gpus=2, device=shared, pin=slots[:2], node=node_id, duration=3600,
                           meta={"nomad_gpu_share_milli": "500"}))
    submit(client, jobspec("half-b", gpus=2, device=shared, pin=slots[:4], node=node_id, duration=3600,
                           meta={"nomad_gpu_share_milli": "500"}))
    audit = cluster.audit()
    (a,), (b,) = job_allocs(audit, "half-a"), job_allocs(audit, "half-b")
    assert sorted(a["device_ids"]) == sorted(slots[:2]) and sorted(b["device_ids"]) == sorted(slots[2:4])
    assert (a["share_gpu"], a["share_milli"], b["share_gpu"]) == (gpu, 500, gpu)
    assert audit["shared_gpus"][gpu] == 1000 and audit["share_oversubscriptions"] == 0
    submit(client, jobspec("again", gpus=1, device=shared, pin=slots[:1], node=node_id, duration=3600))
    audit = cluster.audit()
    assert job_allocs(audit, "again") == [] and audit["double_bookings_refused"] >= 1
    # A plain GPU request never takes a shared GPU whole: the node has no nvidia/gpu group.
    submit(client, jobspec("plain", gpus=1, node=node_id, duration=0.001))
    assert job_allocs(cluster.audit(), "plain") == []
