"""A task that exits by itself, as Nomad's client ends it (`restarts.go` `GetState`, v2.0.5): only batch
jobs treat exit 0 as done; a service job whose task exits 0 with `attempts = 0` ends `failed`."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.restarts import RestartPolicy, Verdict, decide

from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _events(seed: DevCluster, alloc_id: str) -> list[dict[str, Any]]:
    alloc = requests.get(f"{seed.url}/v1/allocation/{alloc_id}", timeout=5).json()
    return list(alloc["TaskStates"]["work"]["Events"])


def _ended(seed: DevCluster, job: str) -> dict[str, Any]:
    return wait_until(lambda: next((a for a in job_allocs(seed.audit(), job)
                                    if a["client_status"] in ("complete", "failed")), None), what=f"{job} ended")


@pytest.mark.server
def test_a_service_task_that_exits_0_with_no_restarts_fails_its_allocation(seed: DevCluster,
                                                                          client: nomad.Nomad) -> None:
    submit(client, jobspec("svc", job_type="service", gpus=1, duration=0.001, restart=(0, "fail")))
    ended = _ended(seed, "svc")
    assert ended["client_status"] == "failed"
    events = _events(seed, ended["alloc_id"])
    assert [e["Type"] for e in events[-2:]] == ["Terminated", "Not Restarting"]
    assert events[-2]["ExitCode"] == 0 and not events[-2]["FailsTask"]
    assert events[-1]["FailsTask"] and events[-1]["DisplayMessage"] == "Policy allows no restarts"


@pytest.mark.server
def test_a_batch_task_that_exits_0_completes(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("bat", gpus=1, duration=0.001, restart=(0, "fail")))
    ended = _ended(seed, "bat")
    assert ended["client_status"] == "complete"
    assert [e["Type"] for e in _events(seed, ended["alloc_id"])][-1] == "Terminated"


@pytest.mark.server
def test_a_service_task_restarts_on_exit_0_until_its_attempts_are_used(seed: DevCluster,
                                                                      client: nomad.Nomad) -> None:
    submit(client, jobspec("svc2", job_type="service", gpus=1, duration=0.001, restart=(2, "fail")))
    ended = _ended(seed, "svc2")
    assert ended["client_status"] == "failed"
    alloc = requests.get(f"{seed.url}/v1/allocation/{ended['alloc_id']}", timeout=5).json()
    assert alloc["TaskStates"]["work"]["Restarts"] == 2
    kinds = [e["Type"] for e in alloc["TaskStates"]["work"]["Events"]]
    assert kinds.count("Restarting") == 2 and kinds[-1] == "Not Restarting"
    assert alloc["TaskStates"]["work"]["Events"][-1]["DisplayMessage"] == (
        'Exceeded allowed attempts 2 in interval 1h0m0s and mode is "fail"')
    assert len(job_allocs(seed.audit(), "svc2")) == 1, "restarts happen in place, not as new allocations"


@pytest.mark.parametrize(("job_type", "code", "attempts", "mode", "verdict"), [
    pytest.param("service", 0, 0, "fail", Verdict.NOT_RESTARTING, id="service-exit0-no-attempts"),
    pytest.param("batch", 0, 0, "fail", Verdict.TERMINATED, id="batch-exit0-no-attempts"),
    pytest.param("batch", 1, 0, "fail", Verdict.NOT_RESTARTING, id="batch-exit1-no-attempts"),
    pytest.param("batch", 0, 3, "fail", Verdict.TERMINATED, id="batch-exit0-attempts"),
    pytest.param("service", 0, 1, "fail", Verdict.RESTARTING, id="service-exit0-within"),
    pytest.param("service", 1, 1, "delay", Verdict.RESTARTING, id="service-within-delay-mode"),
])
def test_get_state_table(job_type: str, code: int, attempts: int, mode: str, verdict: Verdict) -> None:
    assert decide(RestartPolicy(attempts, 3600.0, 15.0, mode), job_type, code, 0, 0.0, 1.0).verdict is verdict


def test_past_the_attempts_mode_decides_and_a_new_interval_counts_again() -> None:
    fail, delay = RestartPolicy(1, 60.0, 15.0, "fail"), RestartPolicy(1, 60.0, 15.0, "delay")
    assert decide(fail, "service", 1, 1, 0.0, 10.0).verdict is Verdict.NOT_RESTARTING
    waited = decide(delay, "service", 1, 1, 0.0, 10.0)
    assert waited.verdict is Verdict.RESTARTING and waited.delay_s == 50.0
    fresh = decide(fail, "service", 1, 1, 0.0, 61.0)
    assert fresh.verdict is Verdict.RESTARTING and fresh.count == 1 and fresh.window_start == 61.0
