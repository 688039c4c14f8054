"""ETAs against what happened (the surface issue): jobs whose runtime estimates equal their run times on
the dev cluster; each predicted start is checked against the start the dev cluster's audit records."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import ONE_GPU, all_ended, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster


@pytest.mark.e2e
def test_predicted_starts_match_the_audit(tmp_path: Path) -> None:
    with DevCluster(ONE_GPU, speed=1.0, heartbeat_s=1.0) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            for i in range(3):  # 2 s each on the one GPU, estimates equal to the run time
                submit(runtime, spec(f"eta-{i}", duration_s=2.0, extra="runtime: 2\n"))
            wait_for(lambda: any(a["client_status"] == "running" for a in dc.audit()["allocations"]),
                     what="the first job running")
            listed = requests.get(f"{runtime.address}/v1/jobs", params={"eta": "true"}, timeout=10).json()["entries"]
            predicted = {e["name"]: e["eta"] for e in listed if e["state"] == "queued"}
            assert set(predicted) == {"eta-1", "eta-2"} and all(v is not None for v in predicted.values())
            wait_for(lambda: all_ended(runtime), timeout_s=30, what="all three to end")
            started = {e["name"]: e["nomad_job_id"] for e in requests.get(f"{runtime.address}/v1/jobs",
                                                                         timeout=10).json()["entries"]}
            actual = {a["job_id"]: a["started_at"] for a in dc.audit()["allocations"]}
            for name, eta in predicted.items():
                # the forecast knows the run time, not the ~0.1-0.5 s of handoff, parse and start per job
                assert abs(actual[started[name]] - eta) < 1.5, (name, eta, actual[started[name]])
        finally:
            runtime.stop()
