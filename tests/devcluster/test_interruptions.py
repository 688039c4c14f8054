"""Interrupted is not complete: drains with deadlines and alloc stops, per Nomad version.

A killed task ends with ClientStatus `complete` like a successful one (`client/allocrunner`); only
DesiredStatus, DesiredTransition and NextAllocation tell them apart. Drains: `nomad/drainer/`
(v1.10.5, v1.11.2); placements of migrated allocations: `scheduler/reconcile.go` (v1.10.5) and
`scheduler/reconciler/reconcile_cluster.go` (v1.11.2, v2.0.5); alloc stop: `nomad/alloc_endpoint.go`.
"""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _allocs(cluster: DevCluster, job_id: str) -> list[dict[str, Any]]:
    """Full allocations of a job, oldest first."""
    stubs = requests.get(f"{cluster.url}/v1/job/{job_id}/allocations", timeout=5).json()
    full = [requests.get(f"{cluster.url}/v1/allocation/{s['ID']}", timeout=5).json() for s in stubs]
    return sorted(full, key=lambda a: a["CreateIndex"])


def _running(cluster: DevCluster, job_id: str) -> dict[str, Any]:
    return wait_until(lambda: next((a for a in _allocs(cluster, job_id) if a["ClientStatus"] == "running"), None),
                      what=f"{job_id} running")


def _assert_interrupted(alloc: dict[str, Any]) -> None:
    """Client `complete`, but stopped by Nomad to migrate: not a success."""
    assert (alloc["ClientStatus"], alloc["DesiredStatus"]) == ("complete", "stop")
    assert alloc["DesiredTransition"]["Migrate"] is True
    assert alloc["DesiredDescription"] == "alloc is being migrated"
    assert alloc["TaskStates"]["work"]["Events"][-1]["Type"] == "Killed"


@pytest.mark.parametrize("version", ["1.10.5", "2.0.5"])
def test_alloc_stop_places_a_replacement_even_for_batch(make_cluster: ClusterFactory, version: str) -> None:
    cluster = make_cluster(TWO_NODES, nomad_version=version)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, jobspec("stopped", gpus=1, duration=3600))
    old = _running(cluster, "stopped")
    reply = client.allocation.stop_allocation(old["ID"])
    new = wait_until(lambda: next((a for a in _allocs(cluster, "stopped") if a["ID"] != old["ID"]), None))
    old = wait_until(lambda: next((a for a in _allocs(cluster, "stopped") if a["ID"] == old["ID"]
                                   and a["ClientStatus"] != "running"), None), what="the old one's kill_timeout")
    _assert_interrupted(old)
    assert old["NextAllocation"] == new["ID"] and new["PreviousAllocation"] == old["ID"]
    assert new["DesiredStatus"] == "run" and new["Name"] == old["Name"]
    evaluation = requests.get(f"{cluster.url}/v1/evaluation/{reply['EvalID']}", timeout=5).json()
    assert (evaluation["TriggeredBy"], evaluation["Status"]) == ("alloc-stop", "complete")


@pytest.mark.parametrize("version", ["1.10.5", "2.0.5"])
def test_drain_migrates_service_allocations_at_once(make_cluster: ClusterFactory, version: str) -> None:
    cluster = make_cluster(TWO_NODES, nomad_version=version)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    ids = cluster.node_ids()
    submit(client, jobspec("web", gpus=1, duration=3600, job_type="service", datacenters=("dc1",)))
    old = _running(cluster, "web")
    drained = next(name for name, node_id in ids.items() if node_id == old["NodeID"])
    cluster.drain(drained, deadline_s=3600)
    new = wait_until(lambda: next((a for a in _allocs(cluster, "web") if a["ClientStatus"] == "running"
                                   and a["ID"] != old["ID"]), None))
    old = wait_until(lambda: next((a for a in _allocs(cluster, "web") if a["ID"] == old["ID"]
                                   and a["ClientStatus"] == "complete"), None), what="the old one's kill_timeout")
    _assert_interrupted(old)
    assert new["NodeID"] != old["NodeID"] and new["PreviousAllocation"] == old["ID"]
    assert old["DesiredTransition"]["MigrateDisablePlacement"] is None


@pytest.mark.parametrize(("version", "replaced"), [("1.10.5", True), ("1.11.2", False), ("2.0.5", False)])
def test_batch_runs_until_the_drain_deadline(make_cluster: ClusterFactory, version: str, replaced: bool) -> None:
    cluster = make_cluster(TWO_NODES, nomad_version=version)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, jobspec("train", gpus=1, duration=3600, datacenters=("dc1",)))
    old = _running(cluster, "train")
    drained = next(name for name, node_id in cluster.node_ids().items() if node_id == old["NodeID"])
    cluster.drain(drained, deadline_s=0.3)
    assert client.node.get_node(old["NodeID"])["DrainStrategy"]["Deadline"] == 300_000_000
    assert _allocs(cluster, "train")[0]["ClientStatus"] == "running"  # batch waits for the deadline
    node = wait_until(lambda: (n := client.node.get_node(old["NodeID"]))["DrainStrategy"] is None and n,
                      what="drain deadline")
    assert node["SchedulingEligibility"] == "ineligible" and node["LastDrain"]["Status"] == "complete"
    # the drain is complete once its allocations are told to stop (Allocation.TerminalStatus counts the
    # server side); the task itself ends after its kill_timeout (alloc_runner.go killTasks, v2.0.5)
    old_id = old["ID"]
    old = wait_until(lambda: next((a for a in _allocs(cluster, "train")
                                   if a["ID"] == old_id and a["ClientStatus"] != "running"), None),
                     what="the drained allocation ends")
    _assert_interrupted(old)
    if replaced:  # 1.10.x: the reconciler places every migrated allocation
        new = wait_until(lambda: next((a for a in _allocs(cluster, "train") if a["ID"] != old["ID"]), None))
        assert new["PreviousAllocation"] == old["ID"] and new["NodeID"] != old["NodeID"]
        assert old["DesiredTransition"]["MigrateDisablePlacement"] is None
    else:  # 1.11+: MigrateDisablePlacement, nothing replaces it
        assert old["DesiredTransition"]["MigrateDisablePlacement"] is True
        assert old["NextAllocation"] == "" and len(_allocs(cluster, "train")) == 1
        assert client.job.get_job("train")["Status"] == "dead"


def test_a_pinned_replacement_waits_blocked_then_lands_when_the_node_returns(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES, nomad_version="1.10.5")
    client = nomad.Nomad(address=cluster.url, timeout=5)
    ids = cluster.node_ids()
    submit(client, jobspec("pinned", gpus=2, node=ids["n1"], duration=3600))
    old = _running(cluster, "pinned")
    cluster.drain("n1", deadline_s=0.05)
    blocked = wait_until(lambda: next((e for e in requests.get(f"{cluster.url}/v1/job/pinned/evaluations",
                                                               timeout=5).json() if e["Status"] == "blocked"), None),
                         what="a blocked evaluation")
    assert blocked["TriggeredBy"] == "queued-allocs" and "main" in blocked["FailedTGAllocs"]
    assert [a["ID"] for a in _allocs(cluster, "pinned")] == [old["ID"]]
    assert client.job.get_job("pinned")["Status"] == "pending"
    # The node comes back: the replacement lands on the same GPUs, long after the original stopped.
    cluster.node_undrain("n1")
    new = wait_until(lambda: next((a for a in _allocs(cluster, "pinned") if a["ID"] != old["ID"]), None))
    assert new["NodeID"] == ids["n1"] and new["PreviousAllocation"] == old["ID"]
    settled = requests.get(f"{cluster.url}/v1/evaluation/{blocked['ID']}", timeout=5).json()
    assert settled["Status"] == "complete"


def test_a_drain_ended_early_cancels_the_deadline(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    ids = cluster.node_ids()
    submit(client, jobspec("keeps", gpus=1, node=ids["n1"], duration=3600))
    old = _running(cluster, "keeps")
    cluster.drain("n1", deadline_s=0.2)
    cluster.node_undrain("n1")
    cluster.drain("n1", deadline_s=3600)
    wait_until(lambda: cluster.state.timers.pending() <= 2)  # the first deadline fired and did nothing
    assert _allocs(cluster, "keeps")[0]["ClientStatus"] == "running" and len(_allocs(cluster, "keeps")) == 1
    assert client.node.get_node(old["NodeID"])["DrainStrategy"] is not None


def test_a_drain_completes_when_nothing_is_left_to_move(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    ids = cluster.node_ids()
    cluster.drain("n2", deadline_s=3600)  # empty: done at once, still ineligible
    node = client.node.get_node(ids["n2"])
    assert (node["DrainStrategy"], node["SchedulingEligibility"]) == (None, "ineligible")
    assert node["LastDrain"]["Status"] == "complete"
    submit(client, jobspec("short", gpus=1, node=ids["n1"], duration=500))  # 0.5 s at speed 1000
    _running(cluster, "short")
    cluster.drain("n1", deadline_s=3600)
    assert client.node.get_node(ids["n1"])["DrainStrategy"] is not None  # a batch allocation still runs
    wait_until(lambda: client.node.get_node(ids["n1"])["DrainStrategy"] is None, what="the drain to complete")
    assert [a["ClientStatus"] for a in _allocs(cluster, "short")] == ["complete"]
    assert _allocs(cluster, "short")[0]["DesiredStatus"] == "run"  # it ended on its own: a success
