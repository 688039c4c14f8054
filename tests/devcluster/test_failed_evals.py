"""Two ways an evaluation fails, as Nomad v2.0.5 has them:

- the scheduler gives up after its plan attempts (`retryMax`, scheduler/util.go): the eval ends `failed`,
  "maximum attempts reached (N)", and `createBlockedEval(true)` (scheduler/generic_sched.go) links a
  `blocked` eval triggered by `max-plan-attempts` as its `BlockedEval`; it waits for capacity to change
  (nomad/blocked_evals.go), and no `failed-follow-up` is made;
- the broker's delivery limit (`EvalDeliveryLimit` 3, nomad/config.go): `reapFailedEvaluations`
  (nomad/leader.go) marks it failed, "evaluation reached delivery limit (3)", and links a
  `failed-follow-up` eval as its `NextEval`, waiting `EvalFailedFollowupBaselineDelay` (1 min) plus a
  random part of `EvalFailedFollowupDelayRange` (5 min) (`createFailedFollowup`).
"""

from __future__ import annotations

import nomad
import pytest

from nomad_gpu.devcluster import DevCluster

from .conftest import ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster


def test_a_scheduler_that_gives_up_leaves_a_blocked_eval_not_a_follow_up(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(speed=100.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, jobspec("other", gpus=1, duration=100))  # ends after 1 s: capacity changes then
    cluster.fail_evaluations(1)
    submit(client, jobspec("unlucky", gpus=1, duration=3600))
    evals = client.job.get_evaluations("unlucky")
    failed = next(e for e in evals if e["Status"] == "failed")
    assert failed["StatusDescription"] == "maximum attempts reached (2)"  # a batch job
    blocked = next(e for e in evals if e["ID"] == failed["BlockedEval"])
    assert (blocked["Status"], blocked["TriggeredBy"], blocked["StatusDescription"], blocked["PreviousEval"]) == (
        "blocked", "max-plan-attempts", "created due to placement conflicts", failed["ID"])
    assert not any(e["TriggeredBy"] == "failed-follow-up" for e in evals) and failed["NextEval"] == ""
    assert job_allocs(cluster.audit(), "unlucky") == []  # free GPUs, but nothing unblocked it yet
    wait_until(lambda: job_allocs(cluster.audit(), "unlucky"), timeout=10, what="a placement once 'other' ended")
    assert job_allocs(cluster.audit(), "other")[0]["client_status"] == "complete"
    done = next(e for e in client.job.get_evaluations("unlucky") if e["ID"] == blocked["ID"])
    assert done["Status"] == "complete"


def test_the_delivery_limit_makes_a_failed_follow_up_that_waits_one_to_six_minutes(
        make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(speed=100.0)  # a wait of 1-6 min is 0.6-3.6 s
    client = nomad.Nomad(address=cluster.url, timeout=5)
    cluster.fail_evaluations(1, mode="delivery")
    submit(client, jobspec("unlucky", gpus=1, duration=3600))
    evals = client.job.get_evaluations("unlucky")
    failed = next(e for e in evals if e["Status"] == "failed")
    assert failed["StatusDescription"] == "evaluation reached delivery limit (3)" and failed["BlockedEval"] == ""
    follow = next(e for e in evals if e["TriggeredBy"] == "failed-follow-up")
    assert follow["Status"] == "pending"
    assert failed["NextEval"] == follow["ID"] and follow["PreviousEval"] == failed["ID"]
    assert 60 * 10**9 <= follow["Wait"] <= 360 * 10**9
    assert job_allocs(cluster.audit(), "unlucky") == []
    wait_until(lambda: job_allocs(cluster.audit(), "unlucky"), timeout=10, what="the follow-up's placement")
    done = next(e for e in client.job.get_evaluations("unlucky") if e["ID"] == follow["ID"])
    assert done["Status"] == "complete"


def test_an_unknown_way_to_fail_is_refused(seed: DevCluster) -> None:
    with pytest.raises(ValueError, match="mode"):
        seed.fail_evaluations(1, mode="maybe")
