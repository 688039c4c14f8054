"""Interconnect topology end to end: the service against dev cluster nodes whose nomad-gpu plugin publishes
NVLink pairs on two sockets (10 GPUs: 0-4 on one, 5-9 on the other) and an NVSwitch board. Facts come from
the dev cluster's audit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import entries, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster, parse_cluster
from nomad_gpu.devcluster.inventory import build_nodes

pytestmark = pytest.mark.e2e

A100, A800 = "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB"
FLEET: dict[str, Any] = {
    "name": "topology",
    "nodes": [
        {"name": "a100-pairs", "device_plugin": "nomad-gpu", "numa_nodes": 2, "cpu_shares": 128000,
         "memory_mb": 1048576, "gpus": [{"model": A100, "count": 10, "memory_mib": 81920, "nvlink": "pairs"}]},
        {"name": "a800-board", "device_plugin": "nomad-gpu", "numa_nodes": 2, "cpu_shares": 128000,
         "memory_mb": 1048576, "gpus": [{"model": A800, "count": 8, "memory_mib": 81920, "nvlink": "all"}]},
    ],
}


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    dc = DevCluster(FLEET, speed=50.0, heartbeat_s=1.0)
    dc.start()
    yield dc
    dc.stop()


def instance_order(node: str) -> list[str]:
    """The node's GPU IDs in the group's instance order (pairs are 2k and 2k+1 in it)."""
    (found,) = [n for n in build_nodes(parse_cluster(FLEET)) if n.name == node]
    return [i for g in found.groups for i in g.ids]


def test_pairs_stay_whole_a_4_gpu_job_takes_two_and_8_take_the_board(cluster: DevCluster, tmp_path: Path) -> None:
    runtime = start_service(cluster.url, tmp_path / "q.db")
    try:
        def running() -> dict[str, dict[str, Any]]:
            return {e["name"]: e for e in entries(runtime) if e["state"] == "running"}

        for name in ("one-a", "one-b", "one-c"):
            submit(runtime, spec(name, duration_s=3600.0, model=A100))
        wait_for(lambda: set(running()) == {"one-a", "one-b", "one-c"}, 30, "three one-GPU jobs")
        submit(runtime, spec("four", duration_s=3600.0, gpus=4, model=A100))
        submit(runtime, spec("eight", duration_s=3600.0, gpus=8, model=A800))
        wait_for(lambda: {"four", "eight"} <= set(running()), 30, "the 4- and 8-GPU jobs")
        submit(runtime, spec("three", duration_s=3600.0, gpus=3, model=A100))
        wait_for(lambda: "three" in running(), 30, "the 3-GPU job")

        audit = cluster.audit()
        assert overlaps(audit) == 0
        allocs = {a["job_id"]: a for a in audit["allocations"]}
        shown = running()
        devices = {name: set(allocs[e["nomad_job_id"]]["device_ids"]) for name, e in shown.items()}
        pairs = instance_order("a100-pairs")
        position = {gpu: k for k, gpu in enumerate(pairs)}
        # the first two one-GPU jobs took the two GPUs of one pair, not one GPU of two pairs
        singles = sorted(position[g] for name in ("one-a", "one-b", "one-c") for g in devices[name])
        assert singles == [0, 1, 2]
        four = sorted(position[g] for g in devices["four"])
        assert four == [6, 7, 8, 9]  # two whole pairs on one socket (in device order: 3-6, no pair whole)
        assert devices["eight"] == set(instance_order("a800-board"))
        links = {name: {p.get("link") for p in e["placements"]} for name, e in shown.items()}
        assert links["four"] == {"NVLink"} and links["eight"] == {"NVLink"} and links["one-a"] == {None}
        # 3 GPUs are never whole pairs, and what is left spans both sockets: it says so
        assert links["three"] == {"PCIe across NUMA nodes"}
        assert sorted(position[g] for g in devices["three"]) == [3, 4, 5]
    finally:
        runtime.stop()
