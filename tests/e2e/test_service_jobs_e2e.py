"""Service-template jobs against the dev cluster playing Nomad's client: a task that exits 0 by itself
ends its allocation `failed` (`restarts.go` `GetState`, v2.0.5, with the templates' `attempts = 0`), and
the entry is complete, never retried. Batch jobs are unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import all_ended, entries, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster

pytestmark = pytest.mark.e2e


def test_a_service_job_that_exits_0_is_complete_and_not_retried(seed: DevCluster, tmp_path: Path) -> None:
    runtime = start_service(seed.url, tmp_path / "q.db")
    try:
        submit(runtime, spec("inference", duration_s=1.0, retries=2, extra="template: service\n"))
        submit(runtime, spec("training", duration_s=1.0, retries=2))
        wait_for(lambda: all_ended(runtime), 30, "both jobs to end")
        states = {e["name"]: (e["state"], e["attempts"]) for e in entries(runtime)}
    finally:
        runtime.stop()
    assert states == {"inference": ("complete", 0), "training": ("complete", 0)}
    allocs = {a["job_id"]: a for a in seed.audit()["allocations"]}
    assert len(allocs) == 2, "no attempt was launched again"
    by_status = sorted(a["client_status"] for a in allocs.values())
    assert by_status == ["complete", "failed"], "Nomad ends the service job's allocation failed"
