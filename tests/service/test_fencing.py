"""Fencing (service/life/fencing.py): a replica whose lease is not valid sends no write to Nomad, its outage probe
fails too, and every register carries the epoch it passed the check under. Judged by the dev cluster's write
log in `/_dev/audit`, over real HTTP."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.client import NomadUnavailable
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.life.fencing import FencedClient

pytestmark = pytest.mark.server
CLUSTER = Path(__file__).resolve().parents[2] / "clusters" / "seed-a800.yaml"
JOB_HCL = """job "fenced-1" {
  type = "batch"
  datacenters = ["*"]
  meta {
    nomad_gpu_entry = "q000001"
  }
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "busybox"
      }
      resources {
        cpu = 100
        memory = 64
      }
    }
  }
}
"""


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    dc = DevCluster(CLUSTER, speed=10.0, heartbeat_s=1.0)
    dc.start()
    yield dc
    dc.stop()


def writes(dc: DevCluster) -> list[dict[str, Any]]:
    audit = requests.get(f"{dc.url}/_dev/audit", timeout=10).json()
    return list(audit["writes"])


def test_a_replica_without_a_valid_lease_writes_nothing_and_its_probe_fails(cluster: DevCluster) -> None:
    lease = {"valid": False}
    client = FencedClient(NomadSettings(address=cluster.url), writable=lambda: lease["valid"], epoch=lambda: 4)
    job = client.parse(JOB_HCL)  # a read of Nomad's parser: not a write
    with pytest.raises(NomadUnavailable, match="leader's lease"):
        client.register(job, JOB_HCL, create_only=True)
    with pytest.raises(NomadUnavailable, match="leader's lease"):
        client.deregister("fenced-1")
    with pytest.raises(NomadUnavailable, match="leader's lease"):
        client.stop_alloc("0b0e7a7e-0000-0000-0000-000000000000")
    with pytest.raises(NomadUnavailable, match="leader's lease"):
        client.leader()  # the outage probe: a replica without the lease never sees Nomad "back"
    assert writes(cluster) == [] and client.job("fenced-1") is None
    lease["valid"] = True
    client.register(job, JOB_HCL, create_only=True)
    client.deregister("fenced-1")
    (register, deregister) = writes(cluster)
    assert register["method"] == "PUT" or register["method"] == "POST"
    assert register["epoch"] == "4" and register["status"] == 200
    assert deregister["method"] == "DELETE" and deregister["epoch"] is None
    assert f"pid {os.getpid()}" in register["agent"]
    stored = client.job("fenced-1")
    assert stored is not None and stored["Meta"]["nomad_gpu_epoch"] == "4"


def test_a_lease_that_runs_out_while_the_request_is_built_stops_it_as_it_leaves(cluster: DevCluster) -> None:
    answers = iter([True, False])  # valid when register is called, run out by the time its bytes would go
    client = FencedClient(NomadSettings(address=cluster.url), writable=lambda: next(answers, False),
                          epoch=lambda: 1)
    job = client.parse(JOB_HCL)
    with pytest.raises(NomadUnavailable, match="leader's lease"):
        client.register(job, JOB_HCL, create_only=True)
    assert writes(cluster) == [] and client.job("fenced-1") is None
