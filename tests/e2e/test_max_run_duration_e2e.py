"""`max_runtime` against the dev cluster playing Nomad before and from 2.0.3: where every agent has
`max_run_duration` the service writes it and Nomad's client ends the allocation at the deadline
(`EnforceMaxRunDurationTimeout`, client/allocrunner/alloc_runner.go v2.0.3), which the service records
as a time-out, not a success; before 2.0.3 the field is left out and the service's own timer stops
the job. The dev cluster's audit says which of the two ended it."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import all_ended, dev_cluster, entries, spec, start_service, submit, wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("nomad_version", "by_nomad"), [("2.0.3", True), ("2.0.2", False)])
def test_max_runtime_is_enforced_by_nomad_where_it_can_and_by_the_service_otherwise(
        nomad_version: str, by_nomad: bool, tmp_path: Path) -> None:
    dc = dev_cluster("seed-a800", speed=10.0, nomad_version=nomad_version)
    try:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            submit(runtime, spec("long", duration_s=600.0, retries=2, extra="max_runtime: 3\n"))
            wait_for(lambda: all_ended(runtime), 30, "the job to time out")
            (entry,) = entries(runtime)
        finally:
            runtime.stop()
        wait_for(lambda: all(a["client_status"] not in ("pending", "running") for a in dc.audit()["allocations"]),
                 15, "the allocation to end")
        allocs = dc.audit()["allocations"]
    finally:
        dc.stop()
    assert (entry["state"], entry["attempts"]) == ("failed", 0), "a time-out is never retried"
    assert entry["reason"].startswith("timeout:")
    assert len(allocs) == 1
    assert allocs[0]["client_status"] == "complete"
    assert allocs[0]["max_run_exceeded"] is by_nomad
    assert allocs[0]["desired_status"] == ("run" if by_nomad else "stop")
    assert ("max_run_duration" in entry["reason"]) is by_nomad
