"""Create-only registers (`EnforceIndex` + `JobModifyIndex`) and unchanged re-registers, checked as
Nomad checks them: `Job.EnforceIndex` in `nomad/structs/job.go` (v2.0.5; `nomad/job_endpoint.go` in
v1.10.5), the error answered as 500 text by `command/agent/http.go`, and `Job.SpecChanged`."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .helpers import StreamReader, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _register(cluster: DevCluster, job: dict[str, Any], *, path: str = "/v1/jobs", **fields: Any) -> requests.Response:
    return requests.post(f"{cluster.url}{path}", json={"Job": job, **fields}, timeout=5)


def _parsed(client: nomad.Nomad, job_id: str, **options: Any) -> dict[str, Any]:
    return dict(client.jobs.parse(jobspec(job_id, **options), canonicalize=True))


def test_enforce_index_zero_creates_once(seed: DevCluster, client: nomad.Nomad) -> None:
    job = _parsed(client, "once", gpus=1, duration=3600)
    first = _register(seed, job, EnforceIndex=True, JobModifyIndex=0)
    assert first.status_code == 200
    wait_until(lambda: job_allocs(seed.audit(), "once"))

    again = _register(seed, _parsed(client, "once", gpus=2, duration=3600), EnforceIndex=True, JobModifyIndex=0)
    assert (again.status_code, again.text) == (500, "Enforcing job modify index 0: job already exists")
    stored = client.job.get_job("once")
    assert (stored["Version"], stored["JobModifyIndex"]) == (0, first.json()["JobModifyIndex"])
    assert len(job_allocs(seed.audit(), "once")) == 1
    # Only the accepted register is in the audit's register log.
    assert len({j["job_id"]: j for j in seed.audit()["jobs"]}["once"]["registered_at"]) == 1


def test_enforce_index_must_match_the_job_modify_index(seed: DevCluster, client: nomad.Nomad) -> None:
    created = _register(seed, _parsed(client, "cas", duration=3600)).json()
    stale = created["JobModifyIndex"] + 1000
    wrong = _register(seed, _parsed(client, "cas", duration=3600, cpu=600), EnforceIndex=True,
                      JobModifyIndex=stale)
    assert (wrong.status_code, wrong.text) == (
        500, f"Enforcing job modify index {stale}: job exists with conflicting job modify index: "
             f"{created['JobModifyIndex']}")
    right = _register(seed, _parsed(client, "cas", duration=3600, cpu=600), path="/v1/job/cas", EnforceIndex=True,
                      JobModifyIndex=created["JobModifyIndex"])
    assert right.status_code == 200
    assert client.job.get_job("cas")["Version"] == 1


def test_enforce_index_on_a_missing_job(seed: DevCluster, client: nomad.Nomad) -> None:
    reply = _register(seed, _parsed(client, "ghost"), EnforceIndex=True, JobModifyIndex=7)
    assert (reply.status_code, reply.text) == (500, "Enforcing job modify index 7: job does not exist")
    assert requests.get(f"{seed.url}/v1/job/ghost", timeout=5).status_code == 404
    # Without EnforceIndex the index is ignored, as in Nomad.
    assert _register(seed, _parsed(client, "ghost"), JobModifyIndex=7).status_code == 200


def test_a_stopped_job_still_exists_until_purged(seed: DevCluster, client: nomad.Nomad) -> None:
    job = _parsed(client, "stopped", duration=3600)
    assert _register(seed, job, EnforceIndex=True).status_code == 200
    client.job.deregister_job("stopped")
    assert client.job.get_job("stopped")["Stop"] is True
    refused = _register(seed, job, EnforceIndex=True, JobModifyIndex=0)
    assert (refused.status_code, refused.text) == (500, "Enforcing job modify index 0: job already exists")
    client.job.deregister_job("stopped", purge=True)
    assert _register(seed, job, EnforceIndex=True, JobModifyIndex=0).status_code == 200


def test_validation_comes_before_the_index_check(seed: DevCluster) -> None:
    reply = _register(seed, {"ID": "bad", "Type": "batch"}, EnforceIndex=True, JobModifyIndex=5)
    assert reply.status_code == 500 and "Missing job task groups" in reply.text


@pytest.mark.parametrize("fields", [
    pytest.param({"EnforceIndex": "yes"}, id="enforce-not-bool"),
    pytest.param({"JobModifyIndex": -1}, id="negative-index"),
    pytest.param({"JobModifyIndex": "3"}, id="index-not-int"),
])
def test_register_option_types_are_checked(seed: DevCluster, client: nomad.Nomad, fields: dict[str, Any]) -> None:
    reply = _register(seed, _parsed(client, "typed"), **fields)
    assert reply.status_code == 400 and reply.text.startswith("Request decode failed")


def test_unchanged_register_makes_no_version_and_no_job_event(seed: DevCluster, client: nomad.Nomad) -> None:
    reader = StreamReader(seed.url, [("topic", "Job")])
    hcl = jobspec("same", duration=3600)
    first = submit(client, hcl)
    second = submit(client, hcl)
    assert second["JobModifyIndex"] == first["JobModifyIndex"] and second["Index"] > first["Index"]
    assert second["EvalID"] != first["EvalID"]
    job = client.job.get_job("same")
    assert (job["Version"], job["JobModifyIndex"], job["Stop"]) == (0, first["JobModifyIndex"], False)
    reader.wait_for(lambda e: e["Type"] == "JobRegistered")
    # A later change is a new version with its own event.
    third = submit(client, jobspec("same", duration=3600, cpu=700))
    assert client.job.get_job("same")["Version"] == 1
    wait_until(lambda: len([e for e in reader.events if e["Type"] == "JobRegistered"]) == 2)
    assert [e["Index"] for e in reader.events if e["Type"] == "JobRegistered"] == [
        first["JobModifyIndex"], third["JobModifyIndex"]]
    reader.close()


def test_job_read_back_and_summary(seed: DevCluster, client: nomad.Nomad) -> None:
    reply = submit(client, jobspec("readback", gpus=1, duration=3600))
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "readback") if a["client_status"] == "running"])
    job = client.job.get_job("readback")
    assert (job["JobModifyIndex"], job["Version"], job["Status"], job["Stop"]) == (
        reply["JobModifyIndex"], 0, "running", False)
    summary = requests.get(f"{seed.url}/v1/job/readback/summary", timeout=5).json()
    assert summary["JobID"] == "readback" and summary["Summary"]["main"]["Running"] == 1
    client.job.deregister_job("readback")
    job = client.job.get_job("readback")
    assert (job["Status"], job["Stop"]) == ("dead", True) and job["JobModifyIndex"] > reply["JobModifyIndex"]
    # The summary counts client statuses (Nomad's updateSummaryWithAlloc, nomad/state/state_store.go,
    # v2.0.5): the stopped allocation is Complete only once its task has died, after the kill.
    wait_until(lambda: requests.get(f"{seed.url}/v1/job/readback/summary", timeout=5).json()[
        "Summary"]["main"]["Complete"] == 1, timeout=15, what="the stopped allocation counted Complete")
