"""Job garbage collection as Nomad's core scheduler does it (`nomad/core_sched.go` jobGC and
`nomad/state/schema.go` jobIsGCable, v2.0.5): `PUT /v1/system/gc`, the periodic pass, and what is
never collected."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .conftest import TWO_NODES, ClusterFactory
from .helpers import StreamReader, job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _done(cluster: DevCluster, job_id: str) -> None:
    wait_until(lambda: [a for a in job_allocs(cluster.audit(), job_id) if a["client_status"] == "complete"],
               what=f"{job_id} complete")


def test_system_gc_removes_a_finished_batch_job(seed: DevCluster, client: nomad.Nomad) -> None:
    reader = StreamReader(seed.url, [("topic", "Job")])
    submit(client, jobspec("finished", gpus=1, duration=0.001))
    _done(seed, "finished")
    assert client.job.get_job("finished")["Status"] == "dead"
    (alloc,) = client.job.get_allocations("finished")

    reply = requests.put(f"{seed.url}/v1/system/gc", timeout=5)
    assert (reply.status_code, reply.content) == (200, b"")
    wait_until(lambda: requests.get(f"{seed.url}/v1/job/finished", timeout=5).status_code == 404, what="job GC")
    assert requests.get(f"{seed.url}/v1/allocation/{alloc['ID']}", timeout=5).status_code == 404
    assert requests.get(f"{seed.url}/v1/job/finished/evaluations", timeout=5).json() == []
    gone = reader.wait_for(lambda e: e["Type"] == "JobBatchDeregistered")
    assert gone["Key"] == "finished" and gone["Payload"]["Deleted"] is True
    # The audit still shows what ran; a create-only register may use the ID again.
    (audited,) = job_allocs(seed.audit(), "finished")
    assert audited["garbage_collected"] is True and audited["client_status"] == "complete"
    assert seed.audit()["garbage_collection"]["jobs"] == 1
    job = client.jobs.parse(jobspec("finished", duration=0.001), canonicalize=True)
    again = requests.post(f"{seed.url}/v1/jobs", json={"Job": job, "EnforceIndex": True, "JobModifyIndex": 0},
                          timeout=5)
    assert again.status_code == 200
    reader.close()


def test_running_pending_and_live_service_jobs_are_kept(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("running", gpus=1, duration=3600))
    submit(client, jobspec("waiting", gpus=8, duration=0.001))  # 7 GPUs left: blocked
    submit(client, jobspec("service", duration=0.001, job_type="service"))
    # a service task that exits by itself is restarted, then failed (restarts.go `GetState`, v2.0.5)
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "service") if a["client_status"] == "failed"])
    assert client.job.get_job("waiting")["Status"] == "pending"
    assert seed.collect_garbage()["jobs"] == []
    for job_id in ("running", "waiting", "service"):
        assert requests.get(f"{seed.url}/v1/job/{job_id}", timeout=5).status_code == 200

    # Stopped, each becomes collectable once everything it had is terminal.
    for job_id in ("waiting", "running", "service"):  # "waiting" first, or it would take the freed GPUs
        client.job.deregister_job(job_id)
    collected: list[str] = []

    def collect() -> bool:
        # forceGC's cutoff is 1 ms: what was modified within the last millisecond waits for the next pass.
        collected.extend(j["job_id"] for j in seed.collect_garbage()["jobs"])
        return len(collected) == 3

    wait_until(collect)
    assert sorted(collected) == ["running", "service", "waiting"]
    assert seed.audit()["garbage_collection"]["allocs"] == 2


def test_threshold_keeps_recent_jobs(seed: DevCluster, client: nomad.Nomad) -> None:
    submit(client, jobspec("recent", duration=0.001))
    _done(seed, "recent")
    assert seed.collect_garbage(threshold_s=3600)["jobs"] == []
    wait_until(lambda: seed.collect_garbage()["jobs"])
    assert requests.get(f"{seed.url}/v1/job/recent", timeout=5).status_code == 404


def test_periodic_gc_is_off_by_default_and_runs_when_configured(make_cluster: ClusterFactory) -> None:
    quiet = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=quiet.url, timeout=5)
    submit(client, jobspec("stays", duration=0.001))
    _done(quiet, "stays")
    assert quiet.state.timers.pending() == 0 and quiet.audit()["garbage_collection"]["runs"] == 0

    busy = make_cluster({**TWO_NODES, "job_gc_interval_s": 0.02, "job_gc_threshold_s": 0})
    client = nomad.Nomad(address=busy.url, timeout=5)
    submit(client, jobspec("goes", duration=0.001))
    wait_until(lambda: requests.get(f"{busy.url}/v1/job/goes", timeout=5).status_code == 404, what="periodic GC")
    assert busy.audit()["garbage_collection"]["runs"] >= 1


def test_system_gc_is_put_only(seed: DevCluster) -> None:
    reply = requests.get(f"{seed.url}/v1/system/gc", timeout=5)
    assert (reply.status_code, reply.text) == (405, "Invalid method")
