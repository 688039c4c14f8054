"""An admission whose evaluation Nomad's scheduler gave up on ("maximum attempts reached": scheduler/util.go
`retryMax`, v2.0.5) is queued again at once, its job stopped before the failed-follow-up evaluation
(a minute later in Nomad) can place it; it does not wait for the admission deadline."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import ONE_GPU, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["plan", "delivery"])  # a max-plan-attempts blocked eval, or a failed follow-up
def test_a_failed_evaluation_requeues_the_entry_and_no_follow_up_runs_it(tmp_path: Path, mode: str) -> None:
    with DevCluster(ONE_GPU, speed=20, heartbeat_s=1.0) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            dc.fail_evaluations(1, mode)
            (entry,) = submit(runtime, spec("unlucky", duration_s=20.0))
            first_job = entry["nomad_job_id"]

            def state() -> dict[str, object]:
                return dict(requests.get(f"{runtime.address}/v1/jobs/{entry['id']}", timeout=5).json())

            wait_for(lambda: state()["state"] == "complete", timeout_s=30, what="the entry, placed again, to end")
            final = state()
            assert final["refusals"] == 1 and final["attempts"] == 1, "placed again, no retry used"
            history = runtime.scheduler.store.get(entry["id"]).history
            assert any("maximum attempts reached" in str(h.get("reason")) or "delivery limit" in str(h.get("reason"))
                       for h in history)
        finally:
            runtime.stop()
        audit = dc.audit()
        assert [a for a in audit["allocations"] if a["job_id"] == first_job] == [], "the follow-up placed nothing"
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
