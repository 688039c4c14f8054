"""The service through a leader election (issue 39 item 3): while Nomad's servers have no leader every
write and default read answers 500 "No cluster leader" after a 5 s hold (devcluster/election.py,
`getLeaderForRPC` in nomad/rpc.go, v2.0.5 and v1.10.5). That says nothing about a job: admissions
pause, retries stay few, and once a leader is back the queue drains with nothing lost, nothing run
twice and no device double-booked, judged by the dev cluster's audit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import (
    NOMAD_VERSIONS,
    all_ended,
    allocs_per_job,
    dev_cluster,
    entries,
    overlaps,
    spec,
    start_service,
    submit,
    wait_for,
)

pytestmark = pytest.mark.e2e

ELECTION_S = 12.0


@pytest.mark.parametrize("version", NOMAD_VERSIONS)
def test_an_election_with_jobs_running_and_arriving_loses_nothing(tmp_path: Path, version: str) -> None:
    dc = dev_cluster("seed-a800", speed=50.0, nomad_version=version)
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        for i in range(6):  # they run 5 s of real time each; two GPUs stay free
            submit(runtime, spec(f"before-{i}", duration_s=250.0))
        wait_for(lambda: sum(1 for a in dc.audit()["allocations"] if a["client_status"] == "running") == 6,
                 20, "six jobs running")
        dc.election(ELECTION_S)
        for i in range(6):  # accepted while Nomad has no leader; two are admitted onto the free GPUs
            submit(runtime, spec(f"during-{i}", duration_s=50.0))
        wait_for(lambda: runtime.scheduler.outage.down, 15, "admissions to pause")
        assert not dc.audit()["elections"]["leader"], "the election ended before the service noticed it"
        during = {e["name"]: e["state"] for e in entries(runtime)}
        assert "failed" not in during.values(), during
        wait_for(lambda: all_ended(runtime), 90, "every entry to end after the election")
        states = {e["name"]: e["state"] for e in entries(runtime)}
        late = {e["nomad_job_id"] for e in entries(runtime) if e["name"].startswith("during-")}
        assert set(states.values()) == {"complete"} and len(states) == 12, states
        assert not runtime.scheduler.outage.down
    finally:
        runtime.stop()
        dc.stop()
    audit = dc.audit()
    elections = audit["elections"]
    assert elections["refused"] >= 1, "the election was never felt"
    # bounded retries: each refused request was held 5 s first, so the service sent only a few
    assert elections["refused"] <= 3 * ELECTION_S / 5 * 4, elections
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    per_job = allocs_per_job(audit)
    assert len(per_job) == 12 and set(per_job.values()) == {1}, per_job
    assert all(a["client_status"] == "complete" for a in audit["allocations"])
    # nothing was committed without a leader: the jobs that arrived meanwhile started after it
    started = [a["started_at"] for a in audit["allocations"] if a["job_id"] in late]
    assert len(started) == 6 and min(started) >= elections["windows"][0]["end"], (started, elections)
