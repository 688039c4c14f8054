"""The service against the dev cluster, including the failures the watcher must survive."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import (
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

from nomad_gpu.devcluster import DevCluster

pytestmark = pytest.mark.e2e
CLIENT = {"X-Nomad-Gpu-Client": "test"}


def test_queue_drains_onto_eight_gpus_without_double_booking(seed: DevCluster, tmp_path: Path) -> None:
    runtime = start_service(seed.url, tmp_path / "q.db")
    try:
        for i in range(20):
            submit(runtime, spec(f"job-{i}", duration_s=5.0))
        wait_for(lambda: all_ended(runtime), 30, "all jobs to end")
        assert {e["state"] for e in entries(runtime)} == {"complete"}
    finally:
        runtime.stop()
    audit = seed.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    assert all(n == 1 for n in allocs_per_job(audit).values())
    assert len(allocs_per_job(audit)) == 20


def test_registered_job_carries_its_hcl_source(seed: DevCluster, tmp_path: Path) -> None:
    import requests

    runtime = start_service(seed.url, tmp_path / "q.db")
    try:
        (e,) = submit(runtime, spec("with-source", duration_s=1.0))
        wait_for(lambda: all_ended(runtime), 20, "the job to end")
    finally:
        runtime.stop()
    sub = requests.get(f"{seed.url}/v1/job/{e['nomad_job_id']}/submission", params={"version": 0}, timeout=5)
    assert sub.status_code == 200
    body = sub.json()
    assert body["Format"] == "hcl2" and f'job "{e["nomad_job_id"]}"' in body["Source"]
    assert "${device.ids}" in body["Source"]


def test_a_dropped_event_stream_loses_nothing(seed: DevCluster, tmp_path: Path) -> None:
    runtime = start_service(seed.url, tmp_path / "q.db")
    try:
        for i in range(24):
            submit(runtime, spec(f"job-{i}", duration_s=10.0))
        for _ in range(3):
            time.sleep(0.4)
            seed.drop_streams()
        wait_for(lambda: all_ended(runtime), 40, "all jobs to end")
        assert {e["state"] for e in entries(runtime)} == {"complete"}
        assert runtime.watcher.reconnects >= 3
    finally:
        runtime.stop()
    audit = seed.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    assert all(n == 1 for n in allocs_per_job(audit).values())


def test_resume_from_an_index_older_than_the_buffer(tmp_path: Path) -> None:
    dc = dev_cluster("seed-a800", speed=10.0, event_buffer=4)
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        for i in range(16):
            submit(runtime, spec(f"job-{i}", duration_s=10.0))
        wait_for(lambda: sum(e["state"] == "running" for e in entries(runtime)) == 8, 20, "8 running")
        runtime.watcher.backoff.initial_s = 1.5  # stay away while more than the buffer happens
        dc.drop_streams()
        wait_for(lambda: all_ended(runtime), 40, "all jobs to end")
        assert {e["state"] for e in entries(runtime)} == {"complete"}
    finally:
        runtime.stop()
        dc.stop()
    audit = dc.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0


def test_node_down_releases_and_requeues_per_retries(tmp_path: Path) -> None:
    dc = dev_cluster("mixed-fleet", speed=20.0)
    node_ids = dc.node_ids()
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        a100 = "NVIDIA A100-SXM4-80GB"  # two 8-GPU nodes: one 8-GPU job each
        retry = submit(runtime, spec("retry", duration_s=100.0, gpus=8, model=a100, retries=1))
        once = submit(runtime, spec("once", duration_s=100.0, gpus=8, model=a100))
        wait_for(lambda: all(e["state"] == "running" for e in entries(runtime)), 20, "both running")
        nodes = {e["id"]: e["placements"][0]["node"] for e in entries(runtime)}
        victim = nodes[retry[0]["id"]]
        name = next(n for n, i in node_ids.items() if i == victim)
        dc.node_down(name)
        by_id = lambda: {e["id"]: e for e in entries(runtime)}  # noqa: E731
        # a lost attempt is queued again without using a retry (its task may still run: docs/partitions.md)
        wait_for(lambda: by_id()[retry[0]["id"]]["attempts"] == 1, 20, "the retry to be re-queued")
        assert by_id()[retry[0]["id"]]["refusals"] == 1, "no retry used"
        if nodes[once[0]["id"]] == victim:
            wait_for(lambda: by_id()[once[0]["id"]]["attempts"] == 1, 20, "the job without retries re-queued too")
        dc.node_up(name)  # its client reports the lost allocations ended: their GPUs are free
        wait_for(lambda: all_ended(runtime), 60, "all jobs to end")
        final = by_id()
        assert final[retry[0]["id"]]["state"] == "complete" and final[once[0]["id"]]["state"] == "complete"
    finally:
        runtime.stop()
        dc.stop()
    audit = dc.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    assert any(a["lost_at"] is not None for a in audit["allocations"])


def test_a_restarted_service_neither_double_books_nor_forgets(seed: DevCluster, tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    runtime = start_service(seed.url, db)
    for i in range(20):
        submit(runtime, spec(f"job-{i}", duration_s=10.0))
    wait_for(lambda: sum(e["state"] == "running" for e in entries(runtime)) == 8, 20, "8 running")
    runtime.stop()
    time.sleep(0.5)  # jobs keep running (and some finish) while the service is away
    runtime = start_service(seed.url, db)
    try:
        wait_for(lambda: all_ended(runtime), 40, "all jobs to end")
        assert {e["state"] for e in entries(runtime)} == {"complete"}
    finally:
        runtime.stop()
    audit = seed.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    assert all(n == 1 for n in allocs_per_job(audit).values()), allocs_per_job(audit)


def test_a_cancelled_job_keeps_its_gpus_until_nomad_confirms_it_ended(seed: DevCluster, tmp_path: Path) -> None:
    import requests

    runtime = start_service(seed.url, tmp_path / "q.db")
    try:
        running = [submit(runtime, spec(f"long-{i}", duration_s=30.0))[0] for i in range(8)]
        wait_for(lambda: all(e["state"] == "running" for e in entries(runtime)), 20, "8 running")
        waiting = submit(runtime, spec("next", duration_s=5.0))[0]
        r = requests.delete(f"{runtime.address}/v1/jobs/{running[0]['id']}", headers=CLIENT, timeout=5)
        assert r.json()["state"] == "cancelled"
        wait_for(lambda: {e["id"]: e for e in entries(runtime)}[waiting["id"]]["state"] in ("running", "complete"),
                 20, "the next job to take the freed GPU")
        for e in running[1:]:
            requests.delete(f"{runtime.address}/v1/jobs/{e['id']}", headers=CLIENT, timeout=5)
        wait_for(lambda: all_ended(runtime), 30, "all to end")
    finally:
        runtime.stop()
    audit = seed.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    cancelled = [a for a in audit["allocations"] if a["job_id"] == running[0]["nomad_job_id"]]
    assert cancelled and cancelled[0]["client_status"] == "complete" and cancelled[0]["finished_at"] is not None
