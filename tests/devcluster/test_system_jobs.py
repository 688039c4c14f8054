"""System and sysbatch jobs (devcluster/systemjobs.py): one allocation per eligible node of the job's
datacenters and pool (`SystemScheduler`, scheduler/scheduler_system.go v2.0.5), sysbatch runs to completion,
and a system job preempts allocations at least 10 priority lower for its devices (`PreemptForDevice`,
scheduler/feasible/preemption.go; preemption on for system jobs only, `DefaultSchedulerConfig` in
nomad/config.go), marking them as `Plan.AppendPreemptedAlloc` does (nomad/structs/structs.go)."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _with_priority(hcl: str, priority: int) -> str:
    return hcl.replace("  type =", f"  priority = {priority}\n  type =", 1)


def _allocs(cluster: DevCluster, job_id: str) -> list[dict[str, Any]]:
    return list(requests.get(f"{cluster.url}/v1/job/{job_id}/allocations", timeout=5).json())


def _alloc(cluster: DevCluster, alloc_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{cluster.url}/v1/allocation/{alloc_id}", timeout=5).json())


def test_a_system_job_runs_one_allocation_on_each_node_of_its_datacenters(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    reply = submit(client, jobspec("agent", job_type="system", datacenters=("dc1",), duration=3600))
    assert reply["EvalID"]
    running = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "agent") if a["client_status"] == "running"]
                         if len(job_allocs(cluster.audit(), "agent")) == 2 else None)
    ids = cluster.node_ids()
    assert sorted(a["node_id"] for a in running) == sorted([ids["n1"], ids["n2"]])  # n3 is in dc2
    assert {a["Name"] for a in _allocs(cluster, "agent")} == {"agent.main[0]"}


def test_a_node_back_up_gets_the_system_job_then(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    cluster.node_down("n2")
    submit(client, jobspec("agent", job_type="system", datacenters=("dc1",), duration=3600))
    wait_until(lambda: len(job_allocs(cluster.audit(), "agent")) == 1)
    cluster.node_up("n2")
    both = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "agent")] if len(
        job_allocs(cluster.audit(), "agent")) == 2 else None)
    assert {a["node_id"] for a in both} == {cluster.node_ids()["n1"], cluster.node_ids()["n2"]}


def test_a_sysbatch_job_runs_to_completion_once_per_node(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, jobspec("scan", job_type="sysbatch", datacenters=("dc1", "dc2"), duration=1))
    done = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "scan") if a["client_status"] == "complete"]
                      if len(job_allocs(cluster.audit(), "scan")) == 3 and all(
                          a["client_status"] == "complete" for a in job_allocs(cluster.audit(), "scan")) else None)
    assert len({a["node_id"] for a in done}) == 3
    submit(client, jobspec("scan", job_type="sysbatch", datacenters=("dc1", "dc2"), duration=1))  # unchanged
    assert len(job_allocs(cluster.audit(), "scan")) == 3, "not placed again where it completed"
    assert client.job.get_job("scan")["Status"] == "dead"


def test_a_system_job_count_above_one_is_refused(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    with pytest.raises(nomad.api.exceptions.BaseNomadException) as refused:
        submit(client, jobspec("agent", job_type="system", count=2))
    assert "Count cannot exceed 1 with system scheduler" in refused.value.nomad_resp.text


def test_a_system_job_preempts_lower_priority_device_holders(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES, speed=100.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    n1 = cluster.node_ids()["n1"]
    submit(client, _with_priority(jobspec("low", gpus=2, node=n1, duration=3600, reschedule_attempts=None), 50))
    (low,) = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "low") if a["client_status"] == "running"])
    submit(client, _with_priority(jobspec("sys", gpus=1, job_type="system", datacenters=("dc1",),
                                          duration=3600), 60))
    on_n1 = wait_until(lambda: [a for a in _allocs(cluster, "sys") if a["NodeID"] == n1])
    evicted = _alloc(cluster, low["alloc_id"])
    preemptor = _alloc(cluster, on_n1[0]["ID"])
    assert evicted["DesiredStatus"] == "evict"
    assert evicted["DesiredDescription"] == f"Preempted by alloc ID {preemptor['ID']}"
    assert evicted["PreemptedByAllocation"] == preemptor["ID"]
    assert preemptor["PreemptedAllocations"] == [low["alloc_id"]]
    # the client kills the victim (its kill_timeout), and only then starts the preempting allocation
    wait_until(lambda: [a for a in job_allocs(cluster.audit(), "sys") if a["node_id"] == n1 and a["started_at"]],
               timeout=10)
    audit = cluster.audit()
    (victim,) = [a for a in job_allocs(audit, "low") if a["alloc_id"] == low["alloc_id"]]
    (started,) = [a for a in job_allocs(audit, "sys") if a["node_id"] == n1]
    assert victim["client_status"] == "complete" and victim["desired_status"] == "evict"
    assert started["started_at"] >= victim["finished_at"]
    assert set(started["device_ids"]) < set(victim["device_ids"])
    triggers = [e["TriggeredBy"] for e in client.job.get_evaluations("low")]
    assert "preemption" in triggers  # the victim's job is evaluated again: its replacement waits, blocked
    assert audit["double_bookings_refused"] == 0


@pytest.mark.parametrize(("job_type", "priority"), [("system", 59), ("sysbatch", 100)])
def test_no_preemption_within_ten_priorities_nor_by_sysbatch(make_cluster: ClusterFactory, job_type: str,
                                                             priority: int) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    n1 = cluster.node_ids()["n1"]
    submit(client, _with_priority(jobspec("low", gpus=2, node=n1, duration=3600), 50))
    wait_until(lambda: [a for a in job_allocs(cluster.audit(), "low") if a["client_status"] == "running"])
    submit(client, _with_priority(jobspec("sys", gpus=1, job_type=job_type, datacenters=("dc1",),
                                          duration=3600), priority))
    wait_until(lambda: len(job_allocs(cluster.audit(), "sys")) == 1)  # on n2 only
    assert [a["node_id"] for a in job_allocs(cluster.audit(), "sys")] == [cluster.node_ids()["n2"]]
    assert [a["desired_status"] for a in job_allocs(cluster.audit(), "low")] == ["run"]
