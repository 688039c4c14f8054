"""Node partitions: a client that misses its heartbeats keeps running its tasks.

Nomad's servers mark a node down once its heartbeat TTL (10 s at least) plus a 10 s grace pass
(`nodeHeartbeater.resetHeartbeatTimer`, nomad/heartbeat.go; `MinHeartbeatTTL`, `HeartbeatGrace` in
nomad/config.go, v2.0.5 and v1.10.5); its running allocations become `lost` (their devices free at once,
`EvalContext.ProposedAllocs`, scheduler/feasible/context.go) or `unknown` (`disconnect { replace = false }`
or `lost_after`: the reconciler's `disconnecting` set, scheduler/reconciler/filters.go v2.0.5,
scheduler/reconcile_util.go v1.10.5). The tasks run on until the client's own `stop_on_client_after`
(client/heartbeatstop.go) or until it reconnects and kills what the servers stopped. The audit tells
client truth: `finished_at` is when the task really stopped on the node.
"""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster

ONE_NODE = {"name": "one", "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]}]}
SPEED = 20.0  # heartbeat TTL + grace (20 s) is 1 s of wall time
VERSIONS = pytest.mark.parametrize("version", ["1.10.5", "2.0.5"])


def _with_disconnect(hcl: str, **settings: str | bool) -> str:
    lines = ["    disconnect {"]
    for key, value in settings.items():
        lines.append(f"      {key} = {str(value).lower() if isinstance(value, bool) else f'{value!r}'}"
                     .replace("'", '"'))
    lines.append("    }")
    return hcl.replace('  group "main" {\n', '  group "main" {\n' + "\n".join(lines) + "\n", 1)


def _start(make_cluster: ClusterFactory, version: str, hcl: str, job_id: str) -> tuple[DevCluster, nomad.Nomad, str]:
    cluster: DevCluster = make_cluster(ONE_NODE, speed=SPEED, nomad_version=version)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, hcl)
    wait_until(lambda: [a for a in job_allocs(cluster.audit(), job_id) if a["client_status"] == "running"])
    node_id = next(iter(cluster.state.nodes))
    return cluster, client, node_id


def _alloc(cluster: DevCluster, job_id: str, index: int = 0) -> dict:
    return sorted(job_allocs(cluster.audit(), job_id), key=lambda a: a["created_at"])[index]


def _partition(cluster: DevCluster, node_id: str, action: str = "partition") -> dict:
    reply = requests.post(f"{cluster.url}/_dev/node/{node_id}/{action}", timeout=5)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


@VERSIONS
def test_a_lost_allocation_keeps_running_until_its_node_reconnects(make_cluster: ClusterFactory, version: str) -> None:
    cluster, client, node_id = _start(make_cluster, version, jobspec("long", gpus=2, duration=36000), "long")
    began = _partition(cluster, node_id)
    assert began["Partitioned"] is True and began["Status"] == "ready", "the servers notice only after the TTL"
    assert client.node.get_node(node_id)["Status"] == "ready"
    wait_until(lambda: _alloc(cluster, "long")["client_status"] == "lost", timeout=5, what="the servers' verdict")
    lost = _alloc(cluster, "long")
    assert client.node.get_node(node_id)["Status"] == "down"
    assert lost["lost_at"] - lost["started_at"] >= 20.0 / SPEED - 0.05, "TTL 10 s + grace 10 s at least"
    assert lost["finished_at"] is None and lost["task_running"] is True, "the task still runs on the node"
    assert lost["server_finished_at"] is not None
    assert cluster.state.ledger.held() == {}, "the scheduler counts a lost allocation's devices free"
    healed = _partition(cluster, node_id, "heal")
    assert healed["Partitioned"] is False
    wait_until(lambda: _alloc(cluster, "long")["finished_at"] is not None, timeout=5, what="the kill on reconnect")
    old = _alloc(cluster, "long")
    assert old["client_status"] == "complete", "the client's report overwrites `lost` (nestedUpdateAllocFromClient)"
    assert old["finished_at"] - healed_at(cluster, node_id) >= 5.0 / SPEED - 0.05, "killed over its kill_timeout"
    # the replacement Nomad placed at once on the freed GPUs ran beside the old task: two live tenants
    new = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "long") if a["started_at"] and
                              a["alloc_id"] != old["alloc_id"]], timeout=5, what="the replacement")[0]
    assert new["started_at"] < old["finished_at"]
    assert set(new["device_ids"]) == set(old["device_ids"])


def healed_at(cluster: DevCluster, node_id: str) -> float:
    spells = [p for p in cluster.audit()["partitions"] if p["node_id"] == node_id]
    assert spells and spells[-1]["healed_at"] is not None
    return float(spells[-1]["healed_at"])


@VERSIONS
def test_stop_on_client_after_stops_the_task_on_the_cut_off_node(make_cluster: ClusterFactory, version: str) -> None:
    hcl = _with_disconnect(jobspec("job", gpus=1, duration=36000), stop_on_client_after="10s")
    cluster, client, node_id = _start(make_cluster, version, hcl, "job")
    _partition(cluster, node_id)
    cut = cluster.audit()["partitions"][-1]["partitioned_at"]
    wait_until(lambda: _alloc(cluster, "job")["finished_at"] is not None, timeout=5, what="the client's own stop")
    alloc = _alloc(cluster, "job")
    # heartbeatstop.go: stopped once stop_on_client_after passed since the last good heartbeat, then the
    # kill_timeout (5 s by default); the servers, which cannot hear it, still call it running
    assert alloc["finished_at"] - cut >= 15.0 / SPEED - 0.05
    assert alloc["task_running"] is False and alloc["stopped_by_client"] is True
    assert alloc["client_status"] == "running" and alloc["lost_at"] is None
    wait_until(lambda: _alloc(cluster, "job")["client_status"] == "lost", timeout=5)
    # the replacement waits for stop_on_client_after + kill_timeout after the loss (`Allocation.WaitClientStop`,
    # nomad/structs/alloc.go); pinned to nothing, it may land on the node once it is back
    lost_at = _alloc(cluster, "job")["lost_at"]
    _partition(cluster, node_id, "heal")
    new = wait_until(lambda: [a for a in job_allocs(cluster.audit(), "job") if a["started_at"] and
                              a["alloc_id"] != alloc["alloc_id"]], timeout=5, what="the replacement")[0]
    assert new["created_at"] - lost_at >= 15.0 / SPEED - 0.05
    assert _alloc(cluster, "job")["client_status"] == "complete", "reported on reconnect"


@VERSIONS
def test_replace_false_keeps_the_allocation_unknown_with_its_devices(make_cluster: ClusterFactory,
                                                                     version: str) -> None:
    hcl = _with_disconnect(jobspec("job", gpus=1, duration=36000), stop_on_client_after="60s", replace=False)
    cluster, client, node_id = _start(make_cluster, version, hcl, "job")
    _partition(cluster, node_id)
    wait_until(lambda: _alloc(cluster, "job")["client_status"] == "unknown", timeout=5, what="unknown")
    alloc = _alloc(cluster, "job")
    api = requests.get(f"{cluster.url}/v1/allocation/{alloc['alloc_id']}", timeout=5).json()
    assert (api["ClientStatus"], api["DesiredStatus"]) == ("unknown", "run")
    assert client.node.get_node(node_id)["Status"] == "down"
    assert list(cluster.state.ledger.held().values()) == [alloc["alloc_id"]], "unknown is not client-terminal"
    assert cluster.audit()["pending"] == [], "replace = false: no replacement"
    summary = requests.get(f"{cluster.url}/v1/job/job/summary", timeout=5).json()["Summary"]["main"]
    assert summary["Unknown"] == 1
    _partition(cluster, node_id, "heal")  # before the client's 60 s: the task reconnects, still running
    wait_until(lambda: _alloc(cluster, "job")["client_status"] == "running", timeout=5, what="the reconnect")
    assert _alloc(cluster, "job")["finished_at"] is None
    assert len(job_allocs(cluster.audit(), "job")) == 1


def test_lost_after_marks_the_node_disconnected_and_expires_to_lost(make_cluster: ClusterFactory) -> None:
    hcl = _with_disconnect(jobspec("job", gpus=1, duration=36000), lost_after="20s", replace=False)
    cluster, client, node_id = _start(make_cluster, "2.0.5", hcl, "job")
    _partition(cluster, node_id)
    wait_until(lambda: _alloc(cluster, "job")["client_status"] == "unknown", timeout=5, what="unknown")
    assert client.node.get_node(node_id)["Status"] == "disconnected"  # `invalidateHeartbeat`, nomad/heartbeat.go
    wait_until(lambda: _alloc(cluster, "job")["client_status"] == "lost", timeout=5, what="lost_after expiring")
    assert _alloc(cluster, "job")["task_running"] is True


def test_lost_after_with_stop_on_client_after_is_refused(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(ONE_NODE, speed=SPEED)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    hcl = _with_disconnect(jobspec("both", gpus=1), lost_after="20s", stop_on_client_after="10s")
    with pytest.raises(nomad.api.exceptions.BaseNomadException) as raised:
        submit(client, hcl)
    assert "Disconnect cannot be configured with both lost_after and stop_after" in str(raised.value.nomad_resp.text)


def test_a_heal_within_the_ttl_changes_nothing_the_servers_see(make_cluster: ClusterFactory) -> None:
    cluster, client, node_id = _start(make_cluster, "2.0.5", jobspec("job", gpus=1, duration=36000), "job")
    _partition(cluster, node_id)
    _partition(cluster, node_id, "heal")
    wait_until(lambda: cluster.state.clock() - cluster.audit()["partitions"][-1]["partitioned_at"] > 25.0 / SPEED)
    alloc = _alloc(cluster, "job")
    assert (alloc["client_status"], alloc["task_running"]) == ("running", True)
    assert client.node.get_node(node_id)["Status"] == "ready"


def test_a_task_that_ends_while_cut_off_is_reported_on_reconnect(make_cluster: ClusterFactory) -> None:
    cluster, client, node_id = _start(make_cluster, "2.0.5", jobspec("short", gpus=1, duration=10), "short")
    _partition(cluster, node_id)  # the task ends 10 s (0.5 s) later; the servers cannot hear it
    wait_until(lambda: _alloc(cluster, "short")["finished_at"] is not None, timeout=5)
    assert _alloc(cluster, "short")["client_status"] == "running"
    wait_until(lambda: _alloc(cluster, "short")["client_status"] == "lost", timeout=5)
    _partition(cluster, node_id, "heal")
    wait_until(lambda: _alloc(cluster, "short")["client_status"] == "complete", timeout=5, what="the late report")


def test_partition_routes_answer_404_for_an_unknown_node(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(ONE_NODE, speed=SPEED)
    for action in ("partition", "heal"):
        reply = requests.post(f"{cluster.url}/_dev/node/nope/{action}", timeout=5)
        assert reply.status_code == 404


def test_the_disconnect_block_is_parsed(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(ONE_NODE, speed=SPEED)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    hcl = _with_disconnect(jobspec("p", gpus=1), stop_on_client_after="90s", replace=False)
    group = client.jobs.parse(hcl, canonicalize=True)["TaskGroups"][0]
    # `DisconnectStrategy.Canonicalize` (api/tasks.go, v2.0.5) fills Replace and Reconcile, not LostAfter
    assert group["Disconnect"] == {"LostAfter": None, "StopOnClientAfter": 90 * 10**9, "Replace": False,
                                   "Reconcile": "best_score"}


def test_a_lost_allocation_collected_while_cut_off_is_still_stopped_by_its_client(make_cluster: ClusterFactory) -> None:
    """Garbage collection forgets a lost allocation (terminal) whose task still runs; the client stops it on
    reconnect all the same, and the audit records when (client truth), with no report to the servers."""
    cluster, client, node_id = _start(make_cluster, "2.0.5", jobspec("gone", gpus=1, duration=36000), "gone")
    _partition(cluster, node_id)
    wait_until(lambda: _alloc(cluster, "gone")["client_status"] == "lost", timeout=5)
    client.job.deregister_job("gone")
    cluster.collect_garbage()
    (reaped,) = job_allocs(cluster.audit(), "gone")
    assert reaped["garbage_collected"] and reaped["task_running"]
    _partition(cluster, node_id, "heal")
    wait_until(lambda: job_allocs(cluster.audit(), "gone")[0]["finished_at"] is not None, timeout=5,
               what="the client's kill of what the servers forgot")
    assert job_allocs(cluster.audit(), "gone")[0]["client_status"] == "lost"


def test_a_kill_begun_before_the_cut_goes_on_once(make_cluster: ClusterFactory) -> None:
    """The client heard the stop before the cut: its kill goes on over the kill_timeout, not again on heal."""
    hcl = jobspec("k", gpus=1, duration=36000).replace('      driver = "docker"',
                                                       '      driver = "docker"\n      kill_timeout = "25s"', 1)
    cluster, client, node_id = _start(make_cluster, "2.0.5", hcl, "k")
    client.job.deregister_job("k")
    stopped_at = cluster.state.clock()
    _partition(cluster, node_id)
    _partition(cluster, node_id, "heal")
    wait_until(lambda: _alloc(cluster, "k")["client_status"] == "complete", timeout=5)
    alloc = _alloc(cluster, "k")
    assert alloc["finished_at"] - stopped_at < 25.0 / SPEED + 0.5, "ended when the first kill did"
    events = requests.get(f"{cluster.url}/v1/allocation/{alloc['alloc_id']}", timeout=5).json()[
        "TaskStates"]["work"]["Events"]
    assert [e["Type"] for e in events].count("Killing") == 1


def test_a_node_that_died_reports_its_lost_allocations_when_it_returns(make_cluster: ClusterFactory) -> None:
    """`/down` is a node that died with its tasks (they end at once); when it returns, its client restores
    the allocations the servers stopped and reports them ended, which overwrites `lost`
    (`nestedUpdateAllocFromClient`, nomad/state/state_store.go): a companion learns the tasks are gone."""
    cluster, client, node_id = _start(make_cluster, "2.0.5", jobspec("dead", gpus=1, duration=36000), "dead")
    requests.post(f"{cluster.url}/_dev/node/{node_id}/down", timeout=5)
    died = _alloc(cluster, "dead")
    assert (died["client_status"], died["task_running"]) == ("lost", False)
    requests.post(f"{cluster.url}/_dev/node/{node_id}/up", timeout=5)
    back = _alloc(cluster, "dead")
    assert back["client_status"] == "complete" and back["finished_at"] == died["finished_at"]


def _events(cluster: DevCluster, alloc_id: str) -> list[dict]:
    reply = requests.get(f"{cluster.url}/v1/allocation/{alloc_id}", timeout=5).json()
    return list(reply["TaskStates"]["work"]["Events"])


@VERSIONS
def test_the_clients_own_stop_kills_the_task_and_says_so_on_reconnect(make_cluster: ClusterFactory,
                                                                     version: str) -> None:
    """`heartbeatStop.stopAlloc` destroys the allocation runner (client/heartbeatstop.go, v2.0.5 and v1.10.5):
    `allocRunner.destroyImpl` -> `killTasks` gives each running task a `Killing` event with its kill_timeout and
    kills it (`TaskRunner.Kill`, `handleKill`); the exit result is a `Terminated`, then `Killed`
    (`shouldRestart`, client/allocrunner/taskrunner/task_runner.go). The servers read those events when the
    node reconnects (`nestedUpdateAllocFromClient` takes the client's `TaskStates`)."""
    hcl = _with_disconnect(jobspec("job", gpus=1, duration=36000), stop_on_client_after="10s", replace=False)
    cluster, client, node_id = _start(make_cluster, version, hcl, "job")
    _partition(cluster, node_id)
    cut = cluster.audit()["partitions"][-1]["partitioned_at"]
    wait_until(lambda: _alloc(cluster, "job")["finished_at"] is not None, timeout=5, what="the client's own stop")
    alloc = _alloc(cluster, "job")
    assert alloc["finished_at"] - cut >= 15.0 / SPEED - 0.05, "stop_on_client_after, then the kill_timeout"
    wait_until(lambda: _alloc(cluster, "job")["client_status"] == "unknown", timeout=5, what="the servers' verdict")
    _partition(cluster, node_id, "heal")
    wait_until(lambda: _alloc(cluster, "job")["client_status"] == "complete", timeout=5, what="the late report")
    events = _events(cluster, alloc["alloc_id"])
    assert [e["Type"] for e in events][-3:] == ["Killing", "Terminated", "Killed"], events
    assert events[-3]["Details"] == {"kill_timeout": "5s"}
    assert events[-2]["ExitCode"] == 137, "forced at the end of its kill_timeout"
    killing_at = events[-3]["Time"] / 1e9
    assert abs(killing_at - (cut + 10.0 / SPEED)) < 0.25, "the kill begins when stop_on_client_after passes"
    assert _alloc(cluster, "job")["desired_status"] == "run"


def test_a_task_whose_run_ends_inside_its_clients_kill_window_is_killed_all_the_same(
        make_cluster: ClusterFactory) -> None:
    """The kill began (`killCtx` cancelled, `restartTracker.SetKilled`): the task's own exit during the kill
    window is the kill's exit result, `Terminated` with its code and then `Killed` (`handleKill` waits on
    the task's result channel; `shouldRestart` emits `Killed` for a killed task, task_runner.go v2.0.5)."""
    hcl = _with_disconnect(jobspec("win", gpus=1, duration=20), stop_on_client_after="10s", replace=False)
    hcl = hcl.replace('      driver = "docker"', '      driver = "docker"\n      kill_timeout = "25s"', 1)
    cluster, client, node_id = _start(make_cluster, "2.0.5", hcl, "win")
    _partition(cluster, node_id)  # the client's kill begins at 10 s; the task's run ends at 20 s, unforced
    wait_until(lambda: _alloc(cluster, "win")["finished_at"] is not None, timeout=5, what="the task's end")
    alloc = _alloc(cluster, "win")
    assert alloc["finished_at"] - alloc["started_at"] < 25.0 / SPEED, "its run ended before the force"
    assert alloc["stopped_by_client"] is True
    _partition(cluster, node_id, "heal")
    wait_until(lambda: _alloc(cluster, "win")["client_status"] == "complete", timeout=5, what="the late report")
    events = _events(cluster, alloc["alloc_id"])
    assert [e["Type"] for e in events][-3:] == ["Killing", "Terminated", "Killed"], events
    assert events[-2]["ExitCode"] == 0


def test_a_kill_its_client_began_cut_off_goes_on_after_the_reconnect(make_cluster: ClusterFactory) -> None:
    """The node reconnects inside its client's kill window: the allocation runner is still being destroyed
    (`destroyImpl` waits for the tasks), so the task's end is the kill's result all the same (`Killed`)."""
    hcl = _with_disconnect(jobspec("back", gpus=1, duration=30), stop_on_client_after="10s", replace=False)
    hcl = hcl.replace('      driver = "docker"', '      driver = "docker"\n      kill_timeout = "28s"', 1)
    cluster, client, node_id = _start(make_cluster, "2.0.5", hcl, "back")
    _partition(cluster, node_id)  # the kill begins at 10 s; the servers say unknown at 20 s; the run ends at 30 s
    wait_until(lambda: _alloc(cluster, "back")["client_status"] == "unknown", timeout=5, what="the servers' verdict")
    assert _alloc(cluster, "back")["stopped_by_client"] is True
    _partition(cluster, node_id, "heal")
    wait_until(lambda: _alloc(cluster, "back")["client_status"] == "complete", timeout=5, what="the task's end")
    events = _events(cluster, _alloc(cluster, "back")["alloc_id"])
    assert [e["Type"] for e in events][-3:] == ["Killing", "Terminated", "Killed"], events
    assert _alloc(cluster, "back")["desired_status"] == "run"
