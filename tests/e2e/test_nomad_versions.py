"""The service against each framing of the event stream Nomad has shipped.

From 1.11.2 (`command/agent/event_endpoint.go`, v2.0.5) the stream is a hijacked connection whose body
ends only when it closes, and an error after the 200 is a plain close; up to 1.11.1 (v1.11.1) it is
chunked. A watcher that waited for the end of the body stalled on its first job against 2.x: 0 of 12
jobs completed, 12 of 12 with the chunked framing.
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


@pytest.mark.parametrize("nomad_version", NOMAD_VERSIONS)
def test_twelve_jobs_complete_on_eight_gpus(nomad_version: str, tmp_path: Path) -> None:
    dc = dev_cluster("seed-a800", speed=10.0, nomad_version=nomad_version)
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        for i in range(12):
            submit(runtime, spec(f"job-{i}", duration_s=3.0))
        wait_for(lambda: all_ended(runtime), 30, "all 12 jobs to end")
        assert [e["state"] for e in entries(runtime)] == ["complete"] * 12
        assert runtime.watcher.reconnects == 0  # one stream, open the whole time
    finally:
        runtime.stop()
        dc.stop()
    audit = dc.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    assert sorted(allocs_per_job(audit).values()) == [1] * 12


@pytest.mark.parametrize("nomad_version", NOMAD_VERSIONS)
def test_streams_dropped_by_the_server_lose_nothing(nomad_version: str, tmp_path: Path) -> None:
    """A drop is a bare close on 2.x and Nomad's error text at the end of the chunked body on 1.10."""
    dc = dev_cluster("seed-a800", speed=10.0, nomad_version=nomad_version)
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        for i in range(10):
            submit(runtime, spec(f"drop-{i}", duration_s=2.0))
        for _ in range(3):
            wait_for(lambda: dc.broker.subscriber_count == 1, 10, "the watcher to subscribe")
            dc.drop_streams()
        wait_for(lambda: all_ended(runtime), 30, "all jobs to end")
        assert {e["state"] for e in entries(runtime)} == {"complete"}
    finally:
        runtime.stop()
        dc.stop()
    audit = dc.audit()
    assert overlaps(audit) == 0 and sorted(allocs_per_job(audit).values()) == [1] * 10
