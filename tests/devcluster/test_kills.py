"""A stopped allocation ends after its tasks' kill_timeout, holding its devices until then
(`allocRunner.killTasks`, client/allocrunner/alloc_runner.go; `TaskRunner.handleKill`, v2.0.5)."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster

ONE_GPU = {"name": "one", "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}


def _with_kill_timeout(hcl: str, timeout: str) -> str:
    return hcl.replace('      driver = "docker"', f'      driver = "docker"\n      kill_timeout = "{timeout}"', 1)


def test_a_stop_kills_over_the_kill_timeout_and_keeps_the_devices(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(ONE_GPU, speed=10.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, _with_kill_timeout(jobspec("slow", gpus=1, duration=3600), "25s"))  # 2.5 s at speed 10
    wait_until(lambda: [a for a in job_allocs(cluster.audit(), "slow") if a["client_status"] == "running"])
    client.job.deregister_job("slow")
    submit(client, jobspec("next", gpus=1, duration=3600))
    (alloc,) = job_allocs(cluster.audit(), "slow")
    assert (alloc["client_status"], alloc["desired_status"]) == ("running", "stop")
    events = requests.get(f"{cluster.url}/v1/allocation/{alloc['alloc_id']}", timeout=5).json()[
        "TaskStates"]["work"]["Events"]
    assert events[-1]["Type"] == "Killing"
    assert events[-1]["DisplayMessage"] == "Sent interrupt. Waiting 25s before force killing"
    assert job_allocs(cluster.audit(), "next") == [], "the GPU is held until the task is gone"
    wait_until(lambda: job_allocs(cluster.audit(), "next"), timeout=10, what="the next job, once the kill ended")
    (alloc,) = job_allocs(cluster.audit(), "slow")
    assert alloc["client_status"] == "complete"


def test_a_kill_timeout_is_capped_at_the_clients_max_kill_timeout(make_cluster: ClusterFactory) -> None:
    """`min(task.KillTimeout, maxKillTimeout)` (`NewDriverHandle`, client/allocrunner/taskrunner/driver_handle.go;
    `TaskEvent.SetKillTimeout`, nomad/structs/structs.go); `max_kill_timeout` is 30s by default
    (command/agent/config.go `DefaultConfig`), v2.0.5."""
    cluster: DevCluster = make_cluster(ONE_GPU, speed=100.0)  # 30 s is 0.3 s; an hour would be 36 s
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, _with_kill_timeout(jobspec("slow", gpus=1, duration=36000), "1h"))
    wait_until(lambda: [a for a in job_allocs(cluster.audit(), "slow") if a["client_status"] == "running"])
    client.job.deregister_job("slow")
    (alloc,) = job_allocs(cluster.audit(), "slow")
    events = requests.get(f"{cluster.url}/v1/allocation/{alloc['alloc_id']}", timeout=5).json()[
        "TaskStates"]["work"]["Events"]
    assert events[-1]["DisplayMessage"] == "Sent interrupt. Waiting 30s before force killing"
    submit(client, jobspec("next", gpus=1, duration=3600))
    wait_until(lambda: job_allocs(cluster.audit(), "next"), timeout=10, what="the next job, after 30 s of kill")
