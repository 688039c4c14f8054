"""Another team's system job on GPU nodes (devcluster/systemjobs.py): its devices are counted as taken, and
when its priority is at least 10 above an entry's, Nomad preempts the entry for it (`PreemptForDevice`,
scheduler/feasible/preemption.go v2.0.5, on for system jobs by default: nomad/config.go). The preempted
entry is queued again without using a retry, saying by what, and runs again once the GPU is free. Judged
by the dev cluster's audit: no device with two tenants at once, no double-booking refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from harness import NOMAD_VERSIONS, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.store.entries import parse_job_id

pytestmark = pytest.mark.e2e

TWO_BY_TWO: dict[str, Any] = {"name": "two-by-two", "nodes": [
    {"name": f"n{k}", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]}
    for k in (1, 2)]}


def _system_job(dc: DevCluster, priority: int, gpus: int = 1) -> None:
    hcl = (f'job "node-agent" {{\n  type = "system"\n  priority = {priority}\n  datacenters = ["dc1"]\n'
           '  meta { nomad_gpu_dev_duration_s = "3600" }\n'
           '  group "g" {\n    task "t" {\n      driver = "docker"\n      config { image = "x" }\n'
           '      resources {\n        cpu = 100\n        memory = 100\n'
           f'        device "nvidia/gpu" {{ count = {gpus} }}\n'
           '      }\n    }\n  }\n}\n')
    job = requests.post(f"{dc.url}/v1/jobs/parse", json={"JobHCL": hcl}, timeout=5).json()
    assert requests.post(f"{dc.url}/v1/jobs", json={"Job": job}, timeout=5).status_code == 200


def _entry(runtime: ServiceRuntime, entry_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{runtime.address}/v1/jobs/{entry_id}", timeout=5).json())


def _runs(audit: dict[str, Any], entry_id: str) -> list[dict[str, Any]]:
    return [a for a in audit["allocations"] if (ref := parse_job_id(a["job_id"])) is not None
            and ref.entry == entry_id]


def test_a_system_jobs_gpus_are_counted_as_taken(tmp_path: Path) -> None:
    with DevCluster(TWO_BY_TWO, speed=20, heartbeat_s=1.0) as dc:
        _system_job(dc, priority=50)  # one GPU on each node, never preempting (delta below 10)
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            ids = [submit(runtime, spec(f"j{k}", duration_s=60.0))[0]["id"] for k in range(4)]
            wait_for(lambda: sum(_entry(runtime, i)["state"] == "running" for i in ids) == 2, what="two running")
            assert sorted(_entry(runtime, i)["state"] for i in ids) == ["queued", "queued", "running", "running"]
        finally:
            runtime.stop()
        audit = dc.audit()
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        assert all(a["desired_status"] == "run" for a in audit["allocations"]), "nothing preempted"


@pytest.mark.parametrize("version", NOMAD_VERSIONS)
def test_an_entry_preempted_by_a_system_job_is_requeued_and_runs_again(tmp_path: Path, version: str) -> None:
    with DevCluster(TWO_BY_TWO, speed=20, heartbeat_s=1.0, nomad_version=version) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            ids = [submit(runtime, spec(f"j{k}", duration_s=40.0))[0]["id"] for k in range(4)]  # priority 50
            wait_for(lambda: all(_entry(runtime, i)["state"] == "running" for i in ids), what="all four running")
            _system_job(dc, priority=60)  # a delta of 10: it takes one GPU on each node
            wait_for(lambda: sum(_entry(runtime, i)["state"] == "queued" for i in ids) == 2, timeout_s=30,
                     what="two entries preempted and queued again")
            preempted = [_entry(runtime, i) for i in ids if _entry(runtime, i)["state"] == "queued"]
            for e in preempted:
                history = [str(h.get("reason")) for h in runtime.scheduler.store.get(e["id"]).history]
                assert any(r.startswith("preempted by allocation ") and r.endswith(" of job node-agent")
                           for r in history), history
                assert e["refusals"] == 1 and e["attempts"] == 1 and e["max_retries"] == 0
            requests.delete(f"{dc.url}/v1/job/node-agent", timeout=5)  # the system job goes: they run again
            wait_for(lambda: all(_entry(runtime, i)["state"] == "complete" for i in ids), timeout_s=60,
                     what="every entry to complete")
        finally:
            runtime.stop()
        audit = dc.audit()
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        evicted = [a for a in audit["allocations"] if a["desired_status"] == "evict"]
        assert len(evicted) == 2
        for e in preempted:
            runs = _runs(audit, e["id"])
            assert [r["desired_status"] for r in runs][0] == "evict" and runs[-1]["client_status"] == "complete"
