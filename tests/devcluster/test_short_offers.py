"""Pins that Nomad before 1.11.1 placed short (`deviceAllocator.createOffer`, scheduler/device.go
v1.10.5; fixed by #27177 in v1.11.1): the group is taken when it has `count` free instances of any
kind and one pinned ID is in it, and the offer keeps only the free pinned ones, fewer or none."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import CLUSTERS, ClusterFactory
from .helpers import job_allocs, jobspec, submit

pytestmark = pytest.mark.server  # each test starts a dev cluster


def _instances(cluster: DevCluster, node: str) -> list[str]:
    node_json = requests.get(f"{cluster.url}/v1/node/{cluster.node_ids()[node]}", timeout=5).json()
    return [i["ID"] for i in node_json["NodeResources"]["Devices"][0]["Instances"]]


@pytest.mark.parametrize(("version", "placed"), [
    pytest.param("1.10.5", [1, 0], id="1.10.5-short-and-empty"),
    pytest.param("1.11.0", [1, 0], id="1.11.0-short-and-empty"),
    pytest.param("1.11.1", None, id="1.11.1-refused"),
    pytest.param("2.0.5", None, id="2.0.5-refused"),
])
def test_a_pin_whose_instance_is_taken(make_cluster: ClusterFactory, version: str, placed: list[int] | None) -> None:
    cluster = make_cluster(CLUSTERS / "seed-a800.yaml", nomad_version=version)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    node_id = cluster.node_ids()["gpu-a800-1"]
    gpus = _instances(cluster, "gpu-a800-1")
    submit(client, jobspec("foreign", gpus=1, node=node_id, pin=gpus[:1], duration=3600))
    submit(client, jobspec("two", gpus=2, node=node_id, pin=gpus[:2], duration=3600))
    submit(client, jobspec("one", gpus=1, node=node_id, pin=gpus[:1], duration=3600))
    audit = cluster.audit()
    if placed is None:
        assert job_allocs(audit, "two") == [] and job_allocs(audit, "one") == []
        return
    assert [len(job_allocs(audit, job)[0]["device_ids"]) for job in ("two", "one")] == placed
    assert job_allocs(audit, "two")[0]["device_ids"] == [gpus[1]], "only the free pinned instance"
