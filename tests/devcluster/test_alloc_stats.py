"""`GET /v1/client/allocation/:id/stats`: the shape the service reads, utilisation from the job's meta."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import CLUSTERS, ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _stats(cluster: DevCluster, alloc_id: str, **params: str) -> requests.Response:
    return requests.get(f"{cluster.url}/v1/client/allocation/{alloc_id}/stats", params=params, timeout=5)


def _running(cluster: DevCluster, job_id: str) -> dict[str, Any]:
    wait_until(lambda: [a["client_status"] for a in job_allocs(cluster.audit(), job_id)] == ["running"])
    (alloc,) = job_allocs(cluster.audit(), job_id)
    return alloc


def test_a_running_gpu_allocation_reports_the_utilisation_its_job_asks_for(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster()
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("busy", gpus=2, duration=3600))
    submit(client, jobspec("lazy", gpus=1, duration=3600, meta={"nomad_gpu_dev_gpu_util": "4"}))
    busy, lazy = _running(cluster, "busy"), _running(cluster, "lazy")
    body = _stats(cluster, lazy["alloc_id"]).json()
    assert set(body) == {"ResourceUsage", "Tasks", "Timestamp"} and list(body["Tasks"]) == ["work"]
    (group,) = body["ResourceUsage"]["DeviceStats"]
    assert (group["Vendor"], group["Type"]) == ("nvidia", "gpu")
    (device_id,) = group["InstanceStats"]
    assert [device_id] == lazy["device_ids"]
    attrs = group["InstanceStats"][device_id]["Stats"]["Attributes"]
    assert attrs["GPU utilization"] == {"IntNumeratorVal": 4, "Unit": "%", "Desc": "GPU utilization"}
    assert attrs["Memory state"]["IntDenominatorVal"] == 81920
    assert "FloatNumeratorVal" not in attrs["GPU utilization"]  # unset StatValue keys are omitted
    (group,) = _stats(cluster, busy["alloc_id"]).json()["ResourceUsage"]["DeviceStats"]
    assert sorted(group["InstanceStats"]) == sorted(busy["device_ids"])
    assert {v["Summary"]["IntNumeratorVal"] for v in group["InstanceStats"].values()} == {100}
    assert _stats(cluster, lazy["alloc_id"], task="other").json()["Tasks"] == {}


def test_mig_stats_depend_on_the_plugin_and_unknown_allocations_are_404(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CLUSTERS / "mixed-fleet.yaml")
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("mig", gpus=1, device="nvidia/gpu/NVIDIA H100 80GB HBM3 MIG 3g.40gb", duration=3600,
                           datacenters=["dc2"]))
    mig = _running(cluster, "mig")
    assert _stats(cluster, mig["alloc_id"]).json()["ResourceUsage"]["DeviceStats"] == []  # the stock plugin: none
    reply = _stats(cluster, "0b3f1c3e-1111-4222-8333-944455556666")
    assert reply.status_code == 404 and reply.text == 'Unknown allocation "0b3f1c3e-1111-4222-8333-944455556666"'


def test_share_instances_report_their_gpu_and_mig_on_the_plugin_reports_memory(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster({"name": "p", "nodes": [{"name": "p1", "device_plugin": "nomad-gpu", "gpus": [
        {"model": "L40S", "memory_mib": 46068, "shared": True, "slots": 4},
        {"model": "H100", "memory_mib": 81920, "mig": ["3g.40gb", "3g.40gb"]}]}]})
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("share", gpus=2, device="nomad-gpu/shared-gpu/L40S", duration=3600,
                           meta={"nomad_gpu_dev_gpu_util": "50"}))
    submit(client, jobspec("mig", gpus=1, device="nvidia/gpu/H100 MIG 3g.40gb", duration=3600,
                           meta={"nomad_gpu_dev_gpu_util": "0"}))
    (group,) = _stats(cluster, _running(cluster, "share")["alloc_id"]).json()["ResourceUsage"]["DeviceStats"]
    assert group["Type"] == "shared-gpu" and len(group["InstanceStats"]) == 2
    attrs = next(iter(group["InstanceStats"].values()))["Stats"]["Attributes"]
    assert attrs["GPU utilization"]["IntNumeratorVal"] == 50 and attrs["Memory state"]["IntNumeratorVal"] == 23034
    (group,) = _stats(cluster, _running(cluster, "mig")["alloc_id"]).json()["ResourceUsage"]["DeviceStats"]
    attrs = next(iter(group["InstanceStats"].values()))["Stats"]["Attributes"]
    assert set(attrs) == {"Memory state"} and attrs["Memory state"]["IntNumeratorVal"] == 0


def test_a_utilisation_timeline_changes_over_the_tasks_life(make_cluster: ClusterFactory) -> None:
    """`dev: {gpu_util: [[0, 80], [600, 0]]}`: 80 % from its start, 0 % from 600 dev-cluster seconds."""
    cluster = make_cluster(speed=1000.0)  # 600 dev-cluster seconds are 0.6 s here
    client = nomad.Nomad(address=cluster.url)
    submit(client, jobspec("session", gpus=1, duration=36000, meta={"nomad_gpu_dev_gpu_util": "0:80,600:0"}))
    alloc = _running(cluster, "session")

    def util() -> int:
        (group,) = _stats(cluster, alloc["alloc_id"]).json()["ResourceUsage"]["DeviceStats"]
        return int(next(iter(group["InstanceStats"].values()))["Summary"]["IntNumeratorVal"])

    wait_until(lambda: util() == 0)
    assert util() == 0  # and it stays at the last step


@pytest.mark.parametrize(
    ("meta", "ran_s", "util"),
    [
        pytest.param("35", 1e6, 35.0, id="a-plain-number-keeps-its-meaning"),
        pytest.param("0:80,600:0", 0.0, 80.0, id="first-step"),
        pytest.param("0:80,600:0", 599.9, 80.0, id="before-the-second"),
        pytest.param("0:80,600:0", 600.0, 0.0, id="from-the-second"),
        pytest.param("60:10", 30.0, 100.0, id="before-the-first-step"),
        pytest.param("0:80,x:0", 900.0, 100.0, id="unreadable"),
    ],
)
def test_the_utilisation_at_a_point_of_the_timeline(meta: str, ran_s: float, util: float) -> None:
    from types import SimpleNamespace

    from nomad_gpu.devcluster.usage import _gpu_util

    alloc = SimpleNamespace(job={"Meta": {"nomad_gpu_dev_gpu_util": meta}, "TaskGroups": []}, task_group="g")
    assert _gpu_util(alloc, ran_s) == util  # type: ignore[arg-type]
