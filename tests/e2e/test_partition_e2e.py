"""The service through a node partition (issue 39 item 1): a node stops heartbeating for 60 s of the dev
cluster's clock while jobs run on it and others wait. Nomad's servers call its allocations `unknown`
(the service renders `disconnect { stop_on_client_after = 60s; replace = false }`), the client stops the
tasks itself, and the node comes back (devcluster/partitions.py). The service queues the cut-off attempts
again without using a retry and keeps their GPUs booked until the tasks are gone; judged by the dev
cluster's audit, which tells client truth: no device ever has two live tenants, every entry completes,
the lost attempts ran again, and never while their old task still ran.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from harness import NOMAD_VERSIONS, all_ended, entries, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.tenancy import live_tenants_max, ran_at_once
from nomad_gpu.store.entries import parse_job_id

pytestmark = pytest.mark.e2e

SPEED = 20.0  # 60 s of partition is 3 s; the heartbeat TTL and grace (20 s) 1 s
PARTITION_S = 60.0
TWO_NODES: dict[str, Any] = {"name": "two", "nodes": [
    {"name": f"n{i}", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]}
    for i in (1, 2)]}


@pytest.mark.parametrize("version", NOMAD_VERSIONS)
def test_a_partition_with_jobs_running_loses_nothing_and_double_books_nothing(tmp_path: Path, version: str) -> None:
    dc = DevCluster(TWO_NODES, speed=SPEED, heartbeat_s=1.0, nomad_version=version)
    dc.start()
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        for i in range(6):  # four run (5 s each), two wait
            submit(runtime, spec(f"job-{i}", duration_s=100.0))
        wait_for(lambda: sum(1 for a in dc.audit()["allocations"] if a["client_status"] == "running") == 4,
                 20, "four jobs running")
        node = next(iter(dc.state.nodes))
        cut_jobs = {a["job_id"] for a in dc.audit()["allocations"] if a["node_id"] == node}
        assert len(cut_jobs) == 2
        dc.partition(node)
        began = time.monotonic()
        wait_for(lambda: sum(1 for e in entries(runtime) if e["attempts"] == 1) == 2, 10,
                 "the two cut-off attempts queued again")
        during = {e["name"]: e for e in entries(runtime)}
        assert "failed" not in {e["state"] for e in during.values()}
        assert {e["nomad_job_id"].rsplit("-", 1)[0] for e in during.values() if e["attempts"]} == cut_jobs
        assert all(e["refusals"] == e["attempts"] for e in during.values()), "no retry used"
        time.sleep(max(0.0, began + PARTITION_S / SPEED - time.monotonic()))
        dc.heal(node)
        wait_for(lambda: all_ended(runtime), 60, "every entry to end after the partition")
        done = {e["name"]: e for e in entries(runtime)}
    finally:
        runtime.stop()
        dc.stop()
    assert {e["state"] for e in done.values()} == {"complete"}, {n: (e["state"], e["reason"]) for n, e in done.items()}
    requeued = [e for e in done.values() if e["attempts"] >= 1]
    assert len(requeued) == 2 and all(e["refusals"] == e["attempts"] for e in requeued), requeued
    audit = dc.audit()
    cut = [a for a in audit["allocations"] if a["job_id"] in cut_jobs]
    assert {a["client_status"] for a in cut} == {"complete"}, "reported on reconnect"
    assert all(a["lost_at"] is not None for a in cut), "the servers lost them"
    assert live_tenants_max(audit["allocations"]) == 1 and overlaps(audit) == 0, "no device with two live tenants"
    by_entry: dict[str, list[dict[str, Any]]] = {}
    for a in audit["allocations"]:
        by_entry.setdefault(parse_job_id(a["job_id"]).entry, []).append(a)  # type: ignore[union-attr]
    assert not [e for e, runs in by_entry.items() if ran_at_once(runs)], "an entry ran twice at once"
    completed = {e for e, runs in by_entry.items()
                 if any(a["client_status"] == "complete" and a["job_id"] not in cut_jobs for a in runs)}
    assert len(completed) == 6, "each entry ran to completion once more"


def test_a_task_its_client_stopped_while_the_service_was_down_runs_again_without_a_retry(tmp_path: Path) -> None:
    """The service is down through the whole partition: its task is killed by its own client past
    `stop_on_client_after` (60 s, the default; `Killing`, `Killed`, client/heartbeatstop.go) and reported
    `complete`, desired `run`, on reconnect. The restarted service sees only that end state and queues the
    entry again without using a retry; the audit shows the entry ran to completion once, after the heal."""
    dc = DevCluster(TWO_NODES, speed=SPEED, heartbeat_s=1.0)
    dc.start()
    db = tmp_path / "q.db"
    runtime = start_service(dc.url, db)
    try:
        submit(runtime, spec("cut", duration_s=200.0))
        wait_for(lambda: [a for a in dc.audit()["allocations"] if a["client_status"] == "running"], 20, "running")
        (first,) = dc.audit()["allocations"]
        runtime.stop()
        dc.partition(first["node_id"])
        wait_for(lambda: dc.audit()["allocations"][0]["finished_at"] is not None, 10, "the client's own stop")
        dc.heal(first["node_id"])
        wait_for(lambda: dc.audit()["allocations"][0]["client_status"] == "complete", 10, "the report on reconnect")
        runtime = start_service(dc.url, db)
        wait_for(lambda: all_ended(runtime), 60, "the entry to end")
        (done,) = entries(runtime)
    finally:
        runtime.stop()
        dc.stop()
    assert done["state"] == "complete", done["reason"]
    assert done["attempts"] == 1 and done["refusals"] == 1, "queued again, no retry used"
    allocs = dc.audit()["allocations"]
    killed = [a for a in allocs if a["stopped_by_client"]]
    ran = [a for a in allocs if a["client_status"] == "complete" and a["desired_status"] == "run"
           and not a["stopped_by_client"]]
    assert [a["alloc_id"] for a in killed] == [first["alloc_id"]]
    assert len(ran) == 1 and ran[0]["started_at"] > killed[0]["finished_at"], "ran once more, after the old task"
