"""Workload classes end to end: the service chooses the kind, the dev cluster's audit judges what ran where.

The fleet: an H100 in MIG mode (3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb, reporting 39.50 / 19.62 / 9.75 GiB as
NVML does), an L40S the project's device plugin shares in 4 slots, and two whole H100s. Which device each
allocation holds is read from the dev cluster (its audit and its node's device groups), never from the
service's own belief."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from harness import entries, overlaps, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster

pytestmark = pytest.mark.e2e

H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
FLEET: dict[str, Any] = {
    "name": "classes",
    "nodes": [
        {"name": "h100-mig-1", "cpu_shares": 64000, "memory_mb": 262144,
         "gpus": [{"model": H100, "count": 1, "memory_mib": 81920,
                   "mig": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}]},
        {"name": "l40s-1", "device_plugin": "nomad-gpu", "cpu_shares": 64000, "memory_mb": 262144,
         "gpus": [{"model": L40S, "count": 1, "memory_mib": 46068, "shared": True, "slots": 4}]},
        {"name": "h100-1", "cpu_shares": 64000, "memory_mb": 262144,
         "gpus": [{"model": H100, "count": 2, "memory_mib": 81920}]},
    ],
}


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    dc = DevCluster(FLEET, speed=50.0, heartbeat_s=1.0)
    dc.start()
    yield dc
    dc.stop()


def job(name: str, body: str) -> str:
    return (f"name: {name}\nteam: e2e\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            f"dev: {{duration_s: 3600}}\n{body}")


def device_names(cluster: DevCluster) -> dict[str, str]:
    """Every device instance of the dev cluster -> its device group's name, as its nodes report them."""
    out: dict[str, str] = {}
    for node_id in cluster.node_ids().values():
        node = requests.get(f"{cluster.url}/v1/node/{node_id}", timeout=10).json()
        for group in node["NodeResources"]["Devices"] or []:
            for inst in group["Instances"]:
                out[inst["ID"]] = f"{group['Type']}/{group['Name']}"
    return out


def held(cluster: DevCluster, runtime: Any) -> dict[str, list[str]]:
    """Entry name -> the device groups its running allocation holds, from the audit."""
    names = device_names(cluster)
    jobs = {e["nomad_job_id"]: e["name"] for e in entries(runtime) if e.get("nomad_job_id")}
    out: dict[str, list[str]] = {}
    for a in cluster.audit()["allocations"]:
        if a["job_id"] in jobs and a["finished_at"] is None:
            out[jobs[a["job_id"]]] = sorted(names[d] for d in a["device_ids"])
    return out


def states(runtime: Any) -> dict[str, str]:
    return {e["name"]: e["state"] for e in entries(runtime)}


def test_each_class_lands_on_its_kind_and_serving_falls_back_to_a_whole_gpu(cluster: DevCluster,
                                                                            tmp_path: Path) -> None:
    runtime = start_service(cluster.url, tmp_path / "q.db")
    try:
        for name in ("serve-a", "serve-b", "serve-c"):
            submit(runtime, job(name, "class: serving\ngpu_memory: 14GiB\n"))
        submit(runtime, job("explore", "class: exploratory\ngpu_memory: 10GiB\n"))
        submit(runtime, job("train", "class: training\ngpu: {count: 1}\n"))
        wait_for(lambda: set(states(runtime).values()) == {"running"}, 30, "every job to run")
        got = held(cluster, runtime)
        mig = {f"gpu/{H100} MIG 3g.40gb", f"gpu/{H100} MIG 2g.20gb"}
        serving = [got[n] for n in ("serve-a", "serve-b", "serve-c")]
        # two serving jobs take the two MIG instances that hold 14 GiB (never a 1g.10gb), the third a whole GPU
        assert sorted(d for s in serving for d in s if "MIG" in d) == sorted(mig)
        assert sorted(s for s in serving if not any("MIG" in d for d in s)) == [[f"gpu/{H100}"]]
        assert all("shared-gpu" not in d for s in serving for d in s)  # never a share
        assert got["explore"] and all(d.startswith("shared-gpu/") for d in got["explore"])
        assert got["train"] == [f"gpu/{H100}"]
        audit = cluster.audit()
        explore = next(a for a in audit["allocations"] if a["share_gpu"] is not None)
        assert explore["share_milli"] == 250  # 10 GiB of 44.99 GiB rounded up to one of 4 slots
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        assert audit["share_oversubscriptions"] == 0
        choices = {e["name"]: e["placements"][0]["choice"] for e in entries(runtime)}
        assert choices["explore"] == (f"exploratory -> share 250/1000 of {L40S} on l40s-1: needs 10 GiB; "
                                      "time-shared; tier 1")
        assert sorted(choices[n].split(" on ")[1] for n in ("serve-a", "serve-b", "serve-c")) == [
            "h100-1: needs 14 GiB; isolated; tier 2", "h100-mig-1: needs 14 GiB; isolated; tier 1",
            "h100-mig-1: needs 14 GiB; isolated; tier 1"]
        assert choices["train"] is None  # an explicit gpu: beside the class: nothing was chosen for it
    finally:
        runtime.stop()


def test_a_waiting_serving_job_says_why_and_serving_with_a_share_is_refused(cluster: DevCluster,
                                                                            tmp_path: Path) -> None:
    runtime = start_service(cluster.url, tmp_path / "q.db")
    try:
        bad = job("bad", "class: serving\nshare: {milli: 250}\n").encode()
        r = requests.post(f"{runtime.address}/v1/jobs", data=bad, headers={"Content-Type": "application/yaml"},
                          timeout=10)
        assert r.status_code == 400
        assert r.json()["error"] == ("groups[main]: class serving with share: is refused: it breaks isolation "
                                     "(the service config's classes.serving.allow_explicit can allow it)")
        for name in ("big-a", "big-b", "big-c", "big-d"):
            submit(runtime, job(name, "class: serving\ngpu_memory: 30GiB\n"))
        wait_for(lambda: sorted(states(runtime).values()) == ["queued", "running", "running", "running"], 30,
                 "three to run and one to wait")
        (waiting,) = [e for e in entries(runtime) if e["state"] == "queued"]
        wait_for(lambda: next(e for e in entries(runtime) if e["id"] == waiting["id"])["reason"].startswith(
            "serving:"), 10, "the class's wait reason")
        reason = next(e for e in entries(runtime) if e["id"] == waiting["id"])["reason"]
        assert reason == ("serving: no isolated option with >= 30 GiB free; 4 shares free; "
                          "3 MIG instances too small")
        running = held(cluster, runtime)
        assert sorted(d for s in running.values() for d in s) == sorted(
            [f"gpu/{H100} MIG 3g.40gb", f"gpu/{H100}", f"gpu/{H100}"])
    finally:
        runtime.stop()


def test_training_may_take_an_idle_shared_gpu_whole_when_the_operator_allows_it(cluster: DevCluster,
                                                                                 tmp_path: Path) -> None:
    """With training tiers [[gpu], [share]] (service config), a class-sized training job finds the two
    whole H100s taken and holds the L40S whole: all four slots of its shared GPU, so no share can join."""
    from nomad_gpu.service.config.classconfig import classes_from_mapping

    policy = classes_from_mapping({"training": {"tiers": [["gpu"], ["share"]]}})
    runtime = start_service(cluster.url, tmp_path / "q.db", classes=policy)
    try:
        for name in ("train-a", "train-b"):
            submit(runtime, job(name, "class: training\n"))
            wait_for(lambda n=name: states(runtime).get(n) == "running", 30, f"{name} to run")
        submit(runtime, job("train-c", "class: training\n"))
        wait_for(lambda: states(runtime).get("train-c") == "running", 30, "train-c to run")
        got = held(cluster, runtime)
        assert got["train-a"] == got["train-b"] == [f"gpu/{H100}"]
        assert got["train-c"] == [f"shared-gpu/{L40S}"] * 4
        audit = cluster.audit()
        (whole_l40s,) = [a for a in audit["allocations"] if a["share_gpu"] is not None]
        assert whole_l40s["share_milli"] == 1000 and overlaps(audit) == 0
        choice = next(e for e in entries(runtime) if e["name"] == "train-c")["placements"][0]["choice"]
        assert choice == f"training -> all of shared {L40S} on l40s-1: any memory; isolated; tier 2"
        submit(runtime, job("explore", "class: exploratory\ngpu_memory: 10GiB\n"))
        wait_for(lambda: states(runtime).get("explore") == "running", 30, "explore to run")
        assert all("shared-gpu" not in d for d in held(cluster, runtime)["explore"])  # the L40S is full
    finally:
        runtime.stop()
