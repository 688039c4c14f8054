"""An empty queue database beside a cluster where this service's jobs still run is refused (issue 26,
item 11): a lost or truncated database started an empty queue under a new job prefix, and the jobs the
old one ran stayed on their GPUs, unmanaged. Every job carries the service's name in its meta, so two
services on one cluster tell theirs apart (the job-ID prefix is random per database)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import requests
from harness import entries, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.app import ServiceRuntime

pytestmark = pytest.mark.e2e


def test_a_new_database_beside_live_jobs_of_the_service_is_refused(seed: DevCluster, tmp_path: Path) -> None:
    first = start_service(seed.url, tmp_path / "old.db")
    try:
        (entry,) = submit(first, spec("keeps-running", duration_s=5000))
        wait_for(lambda: {e["id"]: e["state"] for e in entries(first)}[entry["id"]] == "running", 20, "running")
        job = {e["id"]: e for e in entries(first)}[entry["id"]]["nomad_job_id"]
        meta = requests.get(f"{seed.url}/v1/job/{job}", timeout=5).json()["Meta"]
        assert meta["nomad_gpu_service"] == "nomad-gpu"
    finally:
        first.stop()
    settings = replace(first.settings, db_path=str(tmp_path / "new.db"))
    fresh = ServiceRuntime(settings)
    with pytest.raises(InvalidRequest, match="keeps-running|" + job):
        fresh.start(wait_ready_s=10)
    fresh.stop()
    other = ServiceRuntime(replace(settings, db_path=str(tmp_path / "other.db"),
                                   scheduling=replace(settings.scheduling, service_name="other-queue")))
    other.start(wait_ready_s=10)  # another service's database: not its jobs
    other.stop()
    ignoring = ServiceRuntime(replace(settings, ignore_existing_jobs=True))
    ignoring.start(wait_ready_s=10)
    ignoring.stop()
