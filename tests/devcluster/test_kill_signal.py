"""A stop as Nomad's client plays it: the task's `kill_signal` first, then up to its `kill_timeout`
(capped at the client's `max_kill_timeout`) before the driver forces it.

Events per killed task (client/allocrunner/alloc_runner.go `killTasks`; taskrunner/task_runner.go
`handleKill`, `emitExitResultEvent`, `shouldRestart`; nomad/structs/structs.go
`TaskEvent.PopulateEventDisplayMessage`, v2.0.5): `Killing` ("Sent interrupt. Waiting 25s before force
killing", `Details.kill_timeout`), `Terminated` with the exit code the driver reports, `Killed` ("Task
successfully killed"). A dev task with `nomad_gpu_dev_exit_on_signal_after_s` handles the signal and
exits 0 that many seconds (of the cluster's clock) later, as a task that checkpoints; one that needs
longer than its grace is forced at the kill_timeout (docker: exit code 137, `drivers/docker/handle.go`).
"""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster

ONE_GPU = {"name": "one", "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}
EXIT_AFTER = "nomad_gpu_dev_exit_on_signal_after_s"


def _with_task_lines(hcl: str, *lines: str) -> str:
    extra = "".join(f"\n      {line}" for line in lines)
    return hcl.replace('      driver = "docker"', f'      driver = "docker"{extra}', 1)


def _task_events(cluster: DevCluster, alloc_id: str) -> list[dict[str, Any]]:
    alloc = requests.get(f"{cluster.url}/v1/allocation/{alloc_id}", timeout=5).json()
    return list(alloc["TaskStates"]["work"]["Events"])


def _running(cluster: DevCluster, job_id: str) -> dict[str, Any]:
    return wait_until(lambda: next((a for a in job_allocs(cluster.audit(), job_id)
                                    if a["client_status"] == "running"), None), what=f"{job_id} running")


def test_kill_signal_is_parsed_from_hcl(make_cluster: ClusterFactory) -> None:
    """`kill_signal` is a task attribute (`api/tasks.go` Task.KillSignal, `hcl:"kill_signal,optional"`)."""
    cluster: DevCluster = make_cluster(ONE_GPU)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    hcl = _with_task_lines(jobspec("sig", gpus=1, duration=60), 'kill_signal = "SIGUSR1"', 'kill_timeout = "20s"')
    job = client.jobs.parse(hcl, canonicalize=True)
    (task,) = job["TaskGroups"][0]["Tasks"]
    assert (task["KillSignal"], task["KillTimeout"]) == ("SIGUSR1", 20 * 10**9)


def test_a_task_that_exits_on_its_signal_ends_in_its_grace_with_exit_0(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(ONE_GPU, speed=10.0)  # 25 s of grace is 2.5 s; the exit 0.2 s
    client = nomad.Nomad(address=cluster.url, timeout=5)
    reader = StreamReader(cluster.url, [("topic", "Allocation")])
    hcl = _with_task_lines(jobspec("ckpt", gpus=1, duration=3600, meta={EXIT_AFTER: "2"}),
                           'kill_signal = "SIGUSR1"', 'kill_timeout = "25s"')
    submit(client, hcl)
    alloc = _running(cluster, "ckpt")
    client.job.deregister_job("ckpt")
    submit(client, jobspec("next", gpus=1, duration=3600))
    wait_until(lambda: job_allocs(cluster.audit(), "next"), timeout=10, what="the next job, once the task exited")
    (done,) = job_allocs(cluster.audit(), "ckpt")
    assert done["client_status"] == "complete"
    assert done["kill_signals"] == {"work": "SIGUSR1"}
    events = _task_events(cluster, alloc["alloc_id"])
    killing, terminated, killed = events[-3:]
    assert (killing["Type"], killing["DisplayMessage"]) == (
        "Killing", "Sent interrupt. Waiting 25s before force killing")
    assert killing["Details"] == {"kill_timeout": "25s"}
    assert (terminated["Type"], terminated["DisplayMessage"], terminated["ExitCode"]) == (
        "Terminated", "Exit Code: 0", 0)
    assert (killed["Type"], killed["DisplayMessage"]) == ("Killed", "Task successfully killed")
    grace_used = (done["finished_at"] - killing["Time"] / 1e9) * 10.0  # seconds of the cluster's clock
    assert 2.0 - 0.05 <= grace_used < 25.0, grace_used
    sequence = [(e["Payload"]["Allocation"]["DesiredStatus"], e["Payload"]["Allocation"]["ClientStatus"])
                for e in reader.events if e["Payload"]["Allocation"]["ID"] == alloc["alloc_id"]]
    reader.close()
    deduped = [s for i, s in enumerate(sequence) if i == 0 or s != sequence[i - 1]]
    assert deduped == [("run", "pending"), ("run", "running"), ("stop", "running"), ("stop", "complete")]


def test_a_task_slower_than_its_capped_grace_is_forced_at_the_kill_timeout(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(ONE_GPU, speed=100.0)  # the capped 30 s is 0.3 s
    client = nomad.Nomad(address=cluster.url, timeout=5)
    hcl = _with_task_lines(jobspec("slow", gpus=1, duration=36000, meta={EXIT_AFTER: "45"}), 'kill_timeout = "60s"')
    submit(client, hcl)
    alloc = _running(cluster, "slow")
    client.job.deregister_job("slow")
    wait_until(lambda: job_allocs(cluster.audit(), "slow")[0]["client_status"] == "complete", timeout=10,
               what="the forced kill")
    (done,) = job_allocs(cluster.audit(), "slow")
    assert done["kill_signals"] == {"work": "SIGTERM"}, "docker's default signal (`parseSignal`, drivers/docker)"
    killing, terminated, killed = _task_events(cluster, alloc["alloc_id"])[-3:]
    assert killing["DisplayMessage"] == "Sent interrupt. Waiting 30s before force killing"
    assert (terminated["DisplayMessage"], terminated["ExitCode"]) == ("Exit Code: 137", 137)
    assert killed["Type"] == "Killed"
    grace_used = (done["finished_at"] - killing["Time"] / 1e9) * 100.0
    assert grace_used >= 30.0 - 0.5, grace_used


def test_kill_signal_from_job_json_reaches_the_task(make_cluster: ClusterFactory) -> None:
    """A register with Job JSON (the service's other path) carries `KillSignal` as it is; `SIGKILL`
    cannot be caught, so the task dies at once (exit 137) whatever it would do on a signal."""
    cluster: DevCluster = make_cluster(ONE_GPU, speed=10.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    job = client.jobs.parse(jobspec("hard", gpus=1, duration=3600, meta={EXIT_AFTER: "2"}), canonicalize=True)
    job["TaskGroups"][0]["Tasks"][0]["KillSignal"] = "SIGKILL"
    job["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = 25 * 10**9
    client.jobs.register_job({"Job": job})
    alloc = _running(cluster, "hard")
    client.job.deregister_job("hard")
    wait_until(lambda: job_allocs(cluster.audit(), "hard")[0]["client_status"] == "complete", timeout=10,
               what="the kill")
    (done,) = job_allocs(cluster.audit(), "hard")
    assert done["kill_signals"] == {"work": "SIGKILL"}
    killing, terminated, _ = _task_events(cluster, alloc["alloc_id"])[-3:]
    assert terminated["ExitCode"] == 137
    assert (done["finished_at"] - killing["Time"] / 1e9) * 10.0 < 2.0, "SIGKILL is not handled"
