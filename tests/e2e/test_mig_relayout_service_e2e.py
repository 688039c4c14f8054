"""The service re-lays a MIG GPU for a waiting 3g job, through Nomad, judged by the dev cluster's audit.

One opted-in node (meta `nomad_gpu_mig_relayout: "true"`) with two H100 80GB in MIG mode, each
3g.40gb@0 + 1g.10gb@4, @5, @6. Two long 3g jobs and one long 1g job run; a third 3g job then waits
("waiting for a MIG re-layout of GPU n on h100-mig-1"), the service re-lays the GPU whose three 1g are
idle, and the job runs on the new 3g@4. Nothing running is touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import entries, overlaps, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.service.relayout.config import MigRelayoutConfig
from nomad_gpu.service.relayout.controller import RelayoutSettings

pytestmark = pytest.mark.e2e

LAYOUT = ["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
SPEC: dict[str, Any] = {"name": "mig-relayout", "nodes": [{
    "name": "h100-mig-1", "device_plugin": "nomad-gpu", "meta": {"nomad_gpu_mig_relayout": "true"},
    "cpu_shares": 64000, "memory_mb": 262144,
    "gpus": [{"model": "NVIDIA H100 80GB HBM3", "count": 2, "memory_mib": 81920, "mig": LAYOUT}]}]}


def mig_job(name: str, profile: str, duration_s: float) -> str:
    return (f"name: {name}\nteam: e2e\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            f"mig: {{profile: {profile}}}\ndev: {{duration_s: {duration_s}}}\n")


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    dc = DevCluster(SPEC, speed=50.0, heartbeat_s=1.0)
    dc.start()
    yield dc
    dc.stop()


def state_of(runtime: Any, name: str) -> dict[str, Any]:
    return next(e for e in entries(runtime) if e["name"] == name)


SERVING = ("name: waiting-3g\nteam: e2e\nclass: serving\ngpu_memory: 30GiB\ntask: {image: busybox}\n"
           "resources: {cpu: 1000, memory: 1024}\ndev: {duration_s: 100000}\n")


@pytest.mark.parametrize("waiting", [pytest.param(mig_job("waiting-3g", "3g.40gb", 1e5), id="mig-ask"),
                                     pytest.param(SERVING, id="serving-class-30GiB")])
def test_the_service_relays_the_idle_gpu_and_the_waiting_3g_runs(cluster: DevCluster, tmp_path: Path,
                                                                 waiting: str) -> None:
    config = MigRelayoutConfig(enabled=True, interval_s=0.05,
                               controller=RelayoutSettings(fingerprint_timeout_s=10.0, job_timeout_s=20.0))
    with cluster.state.lock:
        (node,) = cluster.state.nodes.values()
        one_g = {i.id for g in node.mig_gpus for i in g.instances if i.profile == "1g.10gb"}
    runtime = start_service(cluster.url, tmp_path / "q.db", mig_relayout=config)
    try:
        for name, profile in (("serve-a", "3g.40gb"), ("serve-b", "3g.40gb"), ("small", "1g.10gb")):
            submit(runtime, mig_job(name, profile, 1e5))
            wait_for(lambda n=name: state_of(runtime, n)["state"] == "running", what=f"{name} running")
        before = {a["job_id"]: a["device_ids"] for a in cluster.audit()["allocations"]}
        submit(runtime, waiting)
        wait_for(lambda: "waiting for a MIG re-layout" in (state_of(runtime, "waiting-3g").get("reason") or ""),
                 what="the re-layout reason")
        reason = state_of(runtime, "waiting-3g")["reason"]
        assert reason.startswith("waiting for a MIG re-layout of GPU ") and reason.endswith(" on h100-mig-1")
        wait_for(lambda: state_of(runtime, "waiting-3g")["state"] == "running", timeout_s=60, what="the 3g runs")
        audit = cluster.audit()
        (change,) = audit["mig_changes"]
        assert change["before"] == LAYOUT and change["after"] == ["3g.40gb@0", "3g.40gb@4"]
        assert audit["mig_destroyed_in_use"] == 0 and overlaps(audit) == 0
        with cluster.state.lock:
            (node,) = cluster.state.nodes.values()
            relaid = next(g for g in node.mig_gpus if g.uuid == change["gpu"])
            new_3g = next(i.id for i in relaid.instances if i.start == 4)
        (small_on,) = [d for d in before.values() if set(d) <= one_g]
        assert not any(i.id in small_on for i in relaid.instances)  # the GPU whose 1g was busy was left alone
        ran = [a for a in audit["allocations"] if a["device_ids"] == [new_3g]]
        assert ran and ran[0]["client_status"] == "running"
        for job_id, devices in before.items():  # every tenant still runs on what it had
            now = [a for a in audit["allocations"] if a["job_id"] == job_id]
            assert [a["device_ids"] for a in now] == [devices] and all(a["client_status"] == "running" for a in now)
        # The cycle admits as soon as Nomad's node lists the new 3g; the controller notes "done" on its next step.
        wait_for(lambda: runtime.scheduler.status()["mig_relayouts"]["counts"]["done"] == 1, what="done")
        assert runtime.scheduler.status()["mig_relayouts"]["counts"] == {"started": 1, "done": 1, "failed": 0}
    finally:
        runtime.stop()


def test_a_fingerprint_that_never_changes_is_rolled_back_and_the_job_keeps_waiting(tmp_path: Path) -> None:
    never = {**SPEC, "nodes": [{**SPEC["nodes"][0], "mig_fingerprint_delay_s": "never"}]}
    dc = DevCluster(never, speed=50.0, heartbeat_s=1.0)
    dc.start()
    config = MigRelayoutConfig(enabled=True, interval_s=0.05,
                               controller=RelayoutSettings(fingerprint_timeout_s=1.0, backoff_s=3600.0))
    runtime = start_service(dc.url, tmp_path / "q.db", mig_relayout=config)
    try:
        for name in ("serve-a", "serve-b"):
            submit(runtime, mig_job(name, "3g.40gb", 1e5))
            wait_for(lambda n=name: state_of(runtime, n)["state"] == "running", what=f"{name} running")
        submit(runtime, mig_job("waiting-3g", "3g.40gb", 1e5))
        # GPU A's re-layout is rolled back and A backs off; GPU B (its 1g idle too) may be tried next and
        # rolled back the same way. Wait until nothing is in flight and every re-layout started failed.
        def settled() -> bool:
            st = runtime.scheduler.status()["mig_relayouts"]
            return not st["in_flight"] and st["counts"]["failed"] == st["counts"]["started"] >= 1
        wait_for(settled, what="the rollbacks")
        status = runtime.scheduler.status()["mig_relayouts"]
        assert all("did not show the new layout" in f["reason"] for f in status["failed"])
        gpus = [f["gpu"] for f in status["failed"]]
        assert len(gpus) == len(set(gpus)) <= 2  # a GPU that failed is not tried again while it backs off
        # The node really changed (Nomad never saw it); nothing was destroyed under a tenant; the entry waits.
        audit = dc.audit()
        assert len(audit["mig_changes"]) == len(gpus) and audit["mig_destroyed_in_use"] == 0
        wait_for(lambda: "waiting for a MIG re-layout" not in (state_of(runtime, "waiting-3g").get("reason") or ""),
                 what="the plain wait reason again")
        assert state_of(runtime, "waiting-3g")["state"] == "queued"
    finally:
        runtime.stop()
        dc.stop()


def test_a_service_killed_mid_relayout_finishes_it_after_restart(cluster: DevCluster, tmp_path: Path) -> None:
    config = MigRelayoutConfig(enabled=True, interval_s=0.05, controller=RelayoutSettings(fingerprint_timeout_s=30.0))
    runtime = start_service(cluster.url, tmp_path / "q.db", mig_relayout=config)
    for name in ("serve-a", "serve-b"):
        submit(runtime, mig_job(name, "3g.40gb", 1e5))
        wait_for(lambda n=name: state_of(runtime, n)["state"] == "running", what=f"{name} running")
    submit(runtime, mig_job("waiting-3g", "3g.40gb", 1e5))
    wait_for(lambda: bool(runtime.scheduler.status()["mig_relayouts"]["in_flight"]), what="a re-layout in flight")
    runtime.stop()  # killed mid-way: the record is in the store, the apply job in Nomad
    again = start_service(cluster.url, tmp_path / "q.db", mig_relayout=config)
    try:
        wait_for(lambda: state_of(again, "waiting-3g")["state"] == "running", timeout_s=60, what="the 3g runs")
        wait_for(lambda: again.scheduler.status()["mig_relayouts"]["counts"]["done"] == 1, what="done")
        status = again.scheduler.status()["mig_relayouts"]
        assert status["counts"]["started"] == 0 and status["counts"]["done"] == 1  # resumed, not started again
        audit = cluster.audit()
        assert len(audit["mig_changes"]) == 1 and audit["mig_destroyed_in_use"] == 0 and overlaps(audit) == 0
    finally:
        again.stop()


def test_an_idle_3g_on_a_node_without_the_job_s_cpu_does_not_stop_the_relayout(tmp_path: Path) -> None:
    """The only idle 3g.40gb sits on a node with 2,000 MHz; the waiting job needs 3,000 beside it. The
    service re-lays the big node's GPU, whose 1g are idle, instead of waiting on the idle 3g for ever."""
    small = {**SPEC["nodes"][0], "name": "h100-mig-small", "cpu_shares": 2000,
             "gpus": [{**SPEC["nodes"][0]["gpus"][0], "count": 1}]}
    big = {**SPEC["nodes"][0], "gpus": [{**SPEC["nodes"][0]["gpus"][0], "count": 1}]}
    dc = DevCluster({"name": "mig-cpu", "nodes": [small, big]}, speed=50.0, heartbeat_s=1.0)
    dc.start()
    config = MigRelayoutConfig(enabled=True, interval_s=0.05,
                               controller=RelayoutSettings(fingerprint_timeout_s=10.0, job_timeout_s=20.0))
    runtime = start_service(dc.url, tmp_path / "q.db", mig_relayout=config)
    try:
        hungry = mig_job("serve-a", "3g.40gb", 1e5).replace("cpu: 1000", "cpu: 3000")
        submit(runtime, hungry)
        wait_for(lambda: state_of(runtime, "serve-a")["state"] == "running", what="serve-a running")
        submit(runtime, hungry.replace("serve-a", "waiting-3g"))
        wait_for(lambda: state_of(runtime, "waiting-3g")["state"] == "running", timeout_s=60, what="the 3g runs")
        audit = dc.audit()
        (change,) = audit["mig_changes"]
        assert change["node"] == "h100-mig-1"
        assert change["before"] == LAYOUT and change["after"] == ["3g.40gb@0", "3g.40gb@4"]
        assert audit["mig_destroyed_in_use"] == 0 and overlaps(audit) == 0
    finally:
        runtime.stop()
        dc.stop()
