"""Conformance with real Nomad, in both of the dev cluster's version modes (the real-Nomad issue): each
test is one behaviour read from Nomad's source, and the service is judged by the dev cluster's audit.

- A task Nomad kills ends `complete` (`client/allocrunner/alloc_runner.go`, v2.0.5): after
  `alloc stop` or a drain it is an interruption, never a success; `alloc stop` places a replacement,
  batch included (`nomad/alloc_endpoint.go` Stop, v2.0.5), a drain replaces batch allocations only up
  to 1.10 (`nomad/drainer`, v1.10.5 vs v1.11.0+). The entry's job is stopped, so no replacement ever
  outlives the booking.
- A job without `node_pool` is placed only in `default` (`nomad/job_endpoint_hook_node_pool_ce.go`,
  `scheduler/util.go`, v2.0.5): the service holds it to that pool too (issue 31, item 1), and renders the
  pool a spec names.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import NOMAD_VERSIONS, ONE_GPU, all_ended, entries, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings, access_from_mapping


def running_alloc(dc: DevCluster, job_id: str) -> dict[str, object]:
    wait_for(lambda: any(a["job_id"] == job_id and a["client_status"] == "running"
                         for a in dc.audit()["allocations"]), what=f"{job_id} running")
    return next(a for a in dc.audit()["allocations"] if a["job_id"] == job_id and a["client_status"] == "running")


@pytest.mark.e2e
@pytest.mark.parametrize("nomad_version", NOMAD_VERSIONS)
def test_alloc_stop_is_an_interruption_and_no_replacement_outlives_the_booking(nomad_version: str,
                                                                               tmp_path: Path) -> None:
    with DevCluster(ONE_GPU, speed=50, heartbeat_s=1.0, nomad_version=nomad_version) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            (first,) = submit(runtime, spec("stopped", duration_s=3000.0))
            (second,) = submit(runtime, spec("next", duration_s=20.0))
            alloc = running_alloc(dc, first["nomad_job_id"])
            dc.stop_alloc(str(alloc["alloc_id"]))
            wait_for(lambda: all_ended(runtime), timeout_s=60, what="both entries to end")
            states = {e["name"]: e for e in entries(runtime)}
            assert states["stopped"]["state"] == "failed" and "complete" not in states["stopped"]["reason"]
            assert states["next"]["state"] == "complete"
            audit = dc.audit()
            assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
            mine = [a for a in audit["allocations"] if a["job_id"] == first["nomad_job_id"]]
            assert all(a["client_status"] not in ("pending", "running") for a in mine), mine
            job = requests.get(f"{dc.url}/v1/job/{first['nomad_job_id']}", timeout=5).json()
            assert job["Stop"] is True, "the interrupted entry's job is stopped, not left to place replacements"
        finally:
            runtime.stop()


@pytest.mark.e2e
@pytest.mark.parametrize("nomad_version", NOMAD_VERSIONS)
def test_a_drained_batch_job_is_not_a_success(nomad_version: str, tmp_path: Path) -> None:
    cluster = {**ONE_GPU, "nodes": [*ONE_GPU["nodes"], {**ONE_GPU["nodes"][0], "name": "n2"}]}
    with DevCluster(cluster, speed=50, heartbeat_s=1.0, nomad_version=nomad_version) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            (e,) = submit(runtime, spec("drained", duration_s=3000.0, retries=1))
            alloc = running_alloc(dc, e["nomad_job_id"])
            node = next(n for n, i in dc.node_ids().items() if i == alloc["node_id"])
            dc.drain(node, deadline_s=5.0)
            wait_for(lambda: entries(runtime)[0]["attempts"] == 1, timeout_s=60, what="a retry after the drain")
            retried = entries(runtime)[0]
            assert retried["state"] != "complete", "killed at the drain is not a success"
            wait_for(lambda: entries(runtime)[0]["state"] == "running", timeout_s=60, what="the retry running")
            audit = dc.audit()
            assert overlaps(audit) == 0
            old = [a for a in audit["allocations"] if a["job_id"] == e["nomad_job_id"]]
            assert all(a["client_status"] not in ("pending", "running") for a in old), old
        finally:
            runtime.stop()


@pytest.mark.e2e
def test_a_job_without_a_pool_is_held_to_default_and_a_named_pool_runs_there(tmp_path: Path) -> None:
    cluster = {"name": "pools",
               "nodes": [{**ONE_GPU["nodes"][0], "node_pool": "gpu"}]}
    with DevCluster(cluster, speed=50, heartbeat_s=1.0) as dc:
        runtime = ServiceRuntime(ServiceSettings(
            nomad=NomadSettings(address=dc.url), scheduling=SchedulingSettings(tick_s=0.5),
            db_path=str(tmp_path / "q.db"), listen="http://127.0.0.1:0",
            access=access_from_mapping({"node_pools": ["default", "gpu"]})))
        runtime.start(wait_ready_s=10)
        try:
            r = requests.post(f"{runtime.address}/v1/jobs", data=spec("unpooled").encode(), timeout=10,
                              headers={"Content-Type": "application/yaml"})
            assert r.status_code == 422 and "no node in node pool 'default'" in r.json()["error"], r.text
            submit(runtime, spec("pooled", duration_s=10.0, extra="node_pool: gpu\n"))
            wait_for(lambda: all_ended(runtime), timeout_s=30, what="the job to end")
            (entry,) = entries(runtime)
            assert entry["state"] == "complete"
            assert [a["job_id"] for a in dc.audit()["allocations"]] == [entry["nomad_job_id"]]
        finally:
            runtime.stop()
