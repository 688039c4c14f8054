"""Job endpoints: register with Submission, reads, re-register idempotence, deregister, errors."""

from __future__ import annotations

from typing import Any

import nomad
import nomad.api.exceptions as nomad_errors
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def test_register_reply_and_submission_round_trip(seed: DevCluster, client: nomad.Nomad) -> None:
    hcl = jobspec("sub-1", duration=0.001)
    reply = submit(client, hcl)
    assert set(reply) >= {"EvalID", "EvalCreateIndex", "JobModifyIndex", "Warnings", "Index"}
    assert reply["EvalID"] and reply["JobModifyIndex"] == reply["Index"]

    job = client.job.get_job("sub-1")
    assert (job["Version"], job["Stop"], job["JobModifyIndex"]) == (0, False, reply["JobModifyIndex"])
    assert isinstance(job["SubmitTime"], int) and job["SubmitTime"] > 10**18  # Unix ns

    submission = requests.get(f"{seed.url}/v1/job/sub-1/submission", params={"version": 0}).json()
    assert submission == {"Source": hcl, "Format": "hcl2", "VariableFlags": {}, "Variables": "",
                          "Namespace": "default", "JobID": "sub-1", "Version": 0,
                          "JobModifyIndex": reply["JobModifyIndex"]}


@pytest.mark.parametrize(("params", "status", "text"), [
    pytest.param({}, 400, "Unable to parse job submission version parameter", id="no-version"),
    pytest.param({"version": "x"}, 400, "Unable to parse job submission version parameter", id="bad-version"),
    pytest.param({"version": 7}, 404, "job source not found", id="unknown-version"),
])
def test_submission_errors(seed: DevCluster, client: nomad.Nomad, params: dict[str, Any], status: int,
                           text: str) -> None:
    submit(client, jobspec("sub-2", duration=0.001))
    reply = requests.get(f"{seed.url}/v1/job/sub-2/submission", params=params)
    assert (reply.status_code, reply.text) == (status, text)


def test_register_without_submission_has_no_source(seed: DevCluster, client: nomad.Nomad) -> None:
    client.jobs.register_job({"Job": client.jobs.parse(jobspec("nosub"), canonicalize=False)})
    reply = requests.get(f"{seed.url}/v1/job/nosub/submission", params={"version": 0})
    assert (reply.status_code, reply.text) == (404, "job source not found")


def test_reregister_does_not_start_a_second_copy(seed: DevCluster, client: nomad.Nomad) -> None:
    hcl = jobspec("again", gpus=2, duration=3600)
    submit(client, hcl)
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "again") if a["client_status"] == "running"])
    first_index = client.job.get_job("again")["JobModifyIndex"]
    second = submit(client, hcl)
    # An unchanged spec is no new version (`Job.SpecChanged`, nomad/structs/structs.go v2.0.5).
    assert client.job.get_job("again")["Version"] == 0
    assert second["JobModifyIndex"] == first_index and second["EvalID"]
    assert len(job_allocs(seed.audit(), "again")) == 1
    changed = submit(client, jobspec("again", gpus=2, duration=3600, meta={"v": "2"}))
    assert client.job.get_job("again")["Version"] == 1
    assert requests.get(f"{seed.url}/v1/job/again/submission", params={"version": 1}).json()["JobModifyIndex"] == (
        changed["JobModifyIndex"])
    audit_jobs = {j["job_id"]: j for j in seed.audit()["jobs"]}
    assert len(audit_jobs["again"]["registered_at"]) == 3


def test_reregister_after_completion_does_not_run_again(seed: DevCluster, client: nomad.Nomad) -> None:
    hcl = jobspec("done-once", gpus=1, duration=0.001)
    submit(client, hcl)
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "done-once") if a["client_status"] == "complete"])
    submit(client, hcl)
    assert [a["client_status"] for a in job_allocs(seed.audit(), "done-once")] == ["complete"]
    assert client.job.get_job("done-once")["Status"] == "dead"


def test_reregister_after_failure_places_again(seed: DevCluster, client: nomad.Nomad) -> None:
    hcl = jobspec("fails", duration=0.001, fail=True)
    submit(client, hcl)
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "fails") if a["client_status"] == "failed"])
    submit(client, jobspec("fails", duration=0.001))
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "fails") if a["client_status"] == "complete"])
    assert len(job_allocs(seed.audit(), "fails")) == 2


def test_failed_allocation_is_rescheduled_per_policy(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("resched", duration=0.001, fail=True, reschedule_attempts=2))
    wait_until(lambda: len([a for a in job_allocs(seed.audit(), "resched") if a["client_status"] == "failed"]) == 3)
    allocs = requests.get(f"{seed.url}/v1/job/resched/allocations").json()
    assert len(allocs) == 3 and {a["Name"] for a in allocs} == {"resched.main[0]"}


def test_job_reads(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("reads", gpus=1, duration=3600, meta={"owner": "ana"}))
    stubs = client.jobs.get_jobs()
    stub = next(s for s in stubs if s["ID"] == "reads")
    assert "Meta" not in stub and stub["Type"] == "batch" and stub["Status"] == "running"
    assert stub["JobSummary"]["Summary"]["main"]["Running"] + stub["JobSummary"]["Summary"]["main"]["Starting"] == 1
    with_meta = requests.get(f"{seed.url}/v1/jobs", params={"meta": "true"}).json()
    assert next(s for s in with_meta if s["ID"] == "reads")["Meta"]["owner"] == "ana"

    allocs = client.job.get_allocations("reads")
    assert len(allocs) == 1 and "AllocatedResources" not in allocs[0]  # reference section 3 quirk
    assert allocs[0]["JobType"] == "batch" and allocs[0]["JobVersion"] == 0

    missing = requests.get(f"{seed.url}/v1/job/nope")
    assert (missing.status_code, missing.text) == (404, "job not found")
    with pytest.raises(nomad_errors.URLNotFoundNomadException):
        client.job.get_job("nope")


def test_deregister_stops_allocations_and_purge_removes_the_job(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("stopme", gpus=4, duration=3600))
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "stopme") if a["client_status"] == "running"])
    version = client.job.get_job("stopme")["Version"]
    reply = client.job.deregister_job("stopme")
    assert reply["EvalID"] and reply["JobModifyIndex"]
    assert job_allocs(seed.audit(), "stopme")[0]["desired_status"] == "stop"
    # the stop is a new version of the job (nomad/fsm.go handleJobDeregister, v2.0.5)
    assert client.job.get_job("stopme")["Version"] == version + 1
    wait_until(lambda: job_allocs(seed.audit(), "stopme")[0]["client_status"] == "complete", what="the kill")
    job = client.job.get_job("stopme")
    assert job["Stop"] is True and job["Status"] == "dead"

    client.job.deregister_job("stopme", purge=True)
    assert requests.get(f"{seed.url}/v1/job/stopme").status_code == 404


def test_deregister_missing_job_is_200_with_empty_values(seed: DevCluster) -> None:
    reply = requests.delete(f"{seed.url}/v1/job/never-was")
    assert reply.status_code == 200
    assert reply.json() == {"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": 0, "Index": 0}


@pytest.mark.parametrize(("body", "text"), [
    pytest.param({}, "Job must be specified", id="no-job"),
    pytest.param({"Job": {"Name": "x"}}, "Job ID hasn't been provided", id="no-id"),
])
def test_register_400s(seed: DevCluster, body: dict[str, object], text: str) -> None:
    reply = requests.post(f"{seed.url}/v1/jobs", json=body)
    assert (reply.status_code, reply.text) == (400, text)


def test_register_validation_errors_are_500_text(seed: DevCluster) -> None:
    reply = requests.post(f"{seed.url}/v1/jobs", json={"Job": {"ID": "empty", "Type": "batch"}})
    assert reply.status_code == 500 and "Missing job task groups" in reply.text
    reply = requests.post(f"{seed.url}/v1/job/other", json={"Job": {"ID": "empty"}})
    assert (reply.status_code, reply.text) == (400, "Job ID does not match name")


def test_unknown_route_and_method(seed: DevCluster) -> None:
    assert requests.get(f"{seed.url}/v1/nothing").status_code == 404
    reply = requests.delete(f"{seed.url}/v1/nodes")
    assert (reply.status_code, reply.text) == (405, "Invalid method")
