"""The share contract end to end: the service against a dev cluster node that runs the nomad-gpu device
plugin with a GPU shared in 4 slots. Facts come from the dev cluster's audit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import entries, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster

pytestmark = pytest.mark.e2e

L40S = "NVIDIA L40S"
PLUGIN_NODE: dict[str, Any] = {
    "name": "shares",
    "nodes": [{"name": "p1", "device_plugin": "nomad-gpu", "cpu_shares": 64000, "memory_mb": 262144,
               "gpus": [{"model": L40S, "count": 1, "memory_mib": 46068, "shared": True, "slots": 4},
                        {"model": L40S, "count": 1, "memory_mib": 46068}]}],
}


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    dc = DevCluster(PLUGIN_NODE, speed=50.0, heartbeat_s=1.0)
    dc.start()
    yield dc
    dc.stop()


def _share(name: str) -> str:
    return spec(name, duration_s=3600.0, gpus=0, extra="share: {milli: 500}\n")


def test_two_half_shares_split_one_gpu_and_whole_gpu_jobs_never_land_on_it(cluster: DevCluster,
                                                                          tmp_path: Path) -> None:
    runtime = start_service(cluster.url, tmp_path / "q.db")
    try:
        submit(runtime, _share("half-a"))
        submit(runtime, _share("half-b"))
        submit(runtime, spec("whole-a", duration_s=3600.0))
        submit(runtime, spec("whole-b", duration_s=3600.0))

        def running() -> set[str]:
            return {e["name"] for e in entries(runtime) if e["state"] == "running"}

        wait_for(lambda: running() == {"half-a", "half-b", "whole-a"}, 30, "both shares and one whole GPU")
        audit = cluster.audit()
        allocs = {a["job_id"]: a for a in audit["allocations"]}
        by_name = {e["name"]: allocs[e["nomad_job_id"]] for e in entries(runtime) if e.get("nomad_job_id") in allocs}
        a, b, whole = by_name["half-a"], by_name["half-b"], by_name["whole-a"]
        assert len(a["device_ids"]) == len(b["device_ids"]) == 2
        assert set(a["device_ids"]).isdisjoint(b["device_ids"])
        gpu = a["share_gpu"]
        assert gpu is not None and b["share_gpu"] == gpu
        assert {d.rpartition("-share-")[0] for d in a["device_ids"] + b["device_ids"]} == {gpu}
        assert (a["share_milli"], b["share_milli"]) == (500, 500)
        assert audit["shared_gpus"] == {gpu: 1000} and audit["share_oversubscriptions"] == 0
        (whole_gpu,) = whole["device_ids"]
        assert whole_gpu != gpu and "-share-" not in whole_gpu
        # The second whole-GPU job waits: the shared GPU is never taken whole.
        (waiting,) = [e for e in entries(runtime) if e["name"] == "whole-b"]
        assert waiting["state"] == "queued" and "whole-b" not in by_name
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    finally:
        runtime.stop()


STOCK_NODE: dict[str, Any] = {
    "name": "advisory",
    "nodes": [{"name": "s1", "cpu_shares": 64000, "memory_mb": 262144,
               "gpus": [{"model": L40S, "count": 1, "memory_mib": 46068, "shared": True},
                        {"model": L40S, "count": 1, "memory_mib": 46068}]}],
}


def test_advisory_sharing_on_the_stock_plugin_still_packs_shares(tmp_path: Path) -> None:
    """Without the plugin the `sharing:` setting marks a stock GPU shared: the queue packs shares on it
    and names it in the job's environment; Nomad sees no share device (advisory only)."""
    from nomad_gpu.nomad.decode import ShareRule, SharingConfig

    dc = DevCluster(STOCK_NODE, speed=50.0, heartbeat_s=1.0)
    dc.start()
    try:
        (shared,) = dc.state.nodes[dc.node_ids()["s1"]].shared_gpus
        runtime = start_service(dc.url, tmp_path / "q.db",
                                sharing=SharingConfig((ShareRule(gpu_id=shared, slots=4),)))
        try:
            submit(runtime, _share("half-a"))
            submit(runtime, _share("half-b"))
            submit(runtime, spec("whole-a", duration_s=3600.0))
            wait_for(lambda: {e["state"] for e in entries(runtime)} == {"running"}, 30, "all three to run")
            audit = dc.audit()
            shares = [a for a in audit["allocations"] if a["share_gpu"] is not None]
            assert [(a["share_gpu"], a["share_milli"], a["device_ids"]) for a in shares] == [(shared, 500, [])] * 2
            assert audit["shared_gpus"] == {shared: 1000} and audit["share_oversubscriptions"] == 0
            (whole,) = [a for a in audit["allocations"] if a["share_gpu"] is None]
            assert whole["device_ids"] != [shared]
        finally:
            runtime.stop()
    finally:
        dc.stop()
