"""An evaluation the scheduler gives up on ends `failed` ("maximum attempts reached (N)": scheduler/util.go
`retryMax`, v2.0.5) and places nothing; a `failed-follow-up` evaluation runs after
`EvalFailedFollowupBaselineDelay` (nomad/config.go, nomad/structs/eval.go `CreateFailedFollowUpEval`)."""

from __future__ import annotations

import nomad
import pytest

from nomad_gpu.devcluster import DevCluster

from .conftest import ClusterFactory
from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster


def test_a_failed_evaluation_places_nothing_and_its_follow_up_does_later(make_cluster: ClusterFactory) -> None:
    cluster: DevCluster = make_cluster(speed=20.0)  # the follow-up's minute is 3 s
    client = nomad.Nomad(address=cluster.url, timeout=5)
    cluster.fail_evaluations(1)
    submit(client, jobspec("unlucky", gpus=1, duration=3600))
    evals = client.job.get_evaluations("unlucky")
    failed = next(e for e in evals if e["Status"] == "failed")
    assert failed["StatusDescription"] == "maximum attempts reached (2)"  # a batch job
    follow = next(e for e in evals if e["TriggeredBy"] == "failed-follow-up")
    assert follow["Status"] == "pending" and follow["PreviousEval"] == failed["ID"] and follow["Wait"] == 60 * 10**9
    assert job_allocs(cluster.audit(), "unlucky") == []
    wait_until(lambda: job_allocs(cluster.audit(), "unlucky"), timeout=10, what="the follow-up's placement")
    done = next(e for e in client.job.get_evaluations("unlucky") if e["ID"] == follow["ID"])
    assert done["Status"] == "complete"
