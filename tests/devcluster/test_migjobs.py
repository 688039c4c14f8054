"""A `nomad-gpu node mig apply` job re-lays a dev-cluster GPU; Nomad's node shows it after the fingerprint delay."""

from __future__ import annotations

from typing import Any

import nomad
import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.miglayout import ApplyCommand, Instance, MigGpu, apply
from nomad_gpu.nomad.migdecode import decode_mig_placements

from .conftest import ClusterFactory
from .helpers import jobspec, submit, wait_until

pytestmark = pytest.mark.e2e

LAYOUT = ["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]


def cluster_spec(delay: float | str = 5.0) -> dict[str, Any]:
    return {"name": "mig-relayout", "nodes": [{
        "name": "h100-mig-1", "device_plugin": "nomad-gpu", "meta": {"nomad_gpu_mig_relayout": "true"},
        "mig_fingerprint_delay_s": delay, "cpu_shares": 16000, "memory_mb": 65536,
        "gpus": [{"model": "NVIDIA H100 80GB HBM3", "count": 2, "memory_mib": 81920, "mig": LAYOUT}]}]}


def layout(cluster: DevCluster) -> dict[str, list[str]]:
    """What Nomad's node says: placements by GPU, from the plugin's attributes."""
    (node_id,) = cluster.node_ids().values()
    raw = nomad.Nomad(address=cluster.url, timeout=5).node.get_node(node_id)
    out: dict[str, list[str]] = {}
    for p in sorted(decode_mig_placements(raw).values(), key=lambda p: p.start):
        out.setdefault(p.gpu, []).append(f"{p.profile}@{p.start}")
    return out


def ids_of(cluster: DevCluster) -> dict[str, dict[str, str]]:
    """GPU -> placement -> instance ID, as the cluster has them now."""
    with cluster.state.lock:
        (node,) = cluster.state.nodes.values()
        return {g.uuid: {str(i): i.id for i in g.instances} for g in node.mig_gpus}


def apply_job(job_id: str, node: str, gpu: str, target: str, idle: list[str], **kw: Any) -> str:
    hcl = jobspec(job_id, node=node, duration=1.0, **kw)
    return hcl.replace('driver = "docker"', 'driver = "raw_exec"').replace(
        'image = "busybox:1"\n        args = ["sleep", "${NOMAD_META_x}"]',
        f'command = "/usr/local/bin/nomad-gpu"\n        args = ["node", "mig", "apply", "--gpu", "{gpu}", '
        f'"--layout", "{target}", "--expect-idle", "{",".join(idle)}"]')


def occupy(client: nomad.Nomad, node: str, ids: list[str]) -> None:
    for k, iid in enumerate(ids):
        name = "3g.40gb" if k < 2 else "1g.10gb"
        submit(client, jobspec(f"tenant-{k}", node=node, gpus=1, device=f"nvidia/gpu/NVIDIA H100 80GB HBM3 MIG {name}",
                               pin=[iid], duration=100000.0))


def test_apply_job_relays_the_idle_gpu_and_nomad_sees_it_after_the_delay(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(cluster_spec(delay=100.0), speed=100.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    (node,) = cluster.node_ids().values()
    gpus = ids_of(cluster)
    g0, g1 = sorted(gpus)
    occupy(client, node, [gpus[g0]["3g.40gb@0"], gpus[g1]["3g.40gb@0"], gpus[g0]["1g.10gb@4"]])
    wait_until(lambda: sum(a["client_status"] == "running" for a in cluster.audit()["allocations"]) == 3,
               what="tenants running")
    idle = [gpus[g1][p] for p in ("1g.10gb@4", "1g.10gb@5", "1g.10gb@6")]
    submit(client, apply_job("relayout-1", node, g1, "3g.40gb@0,3g.40gb@4", idle))
    audit = wait_until(lambda: (a := cluster.audit())["mig_changes"] and a, what="the change")
    (change,) = audit["mig_changes"]
    assert change["gpu"] == g1 and change["after"] == ["3g.40gb@0", "3g.40gb@4"] and change["before"] == LAYOUT
    assert audit["mig_destroyed_in_use"] == 0
    assert layout(cluster)[g1] == LAYOUT  # Nomad has not seen it yet (100 s at speed 100: 1 s; 50 ms was too
    # short a window for a loaded machine to read the node in)
    wait_until(lambda: layout(cluster)[g1] == ["3g.40gb@0", "3g.40gb@4"], what="the fingerprint")
    assert layout(cluster)[g0] == LAYOUT and ids_of(cluster)[g1]["3g.40gb@0"] == gpus[g1]["3g.40gb@0"]


def test_apply_refuses_a_busy_instance_and_changes_nothing(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(cluster_spec(delay=0.0), speed=100.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    (node,) = cluster.node_ids().values()
    gpus = ids_of(cluster)
    g0, _ = sorted(gpus)
    occupy(client, node, [gpus[g0]["3g.40gb@0"]])
    busy_1g = gpus[g0]["1g.10gb@4"]
    submit(client, jobspec("tenant-1g", node=node, gpus=1, device="nvidia/gpu/NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                           pin=[busy_1g], duration=100000.0))
    wait_until(lambda: all(a["client_status"] == "running" for a in cluster.audit()["allocations"])
               and len(cluster.audit()["allocations"]) == 2, what="tenants running")
    idle = [gpus[g0][p] for p in ("1g.10gb@4", "1g.10gb@5", "1g.10gb@6")]
    submit(client, apply_job("relayout-busy", node, g0, "3g.40gb@0,3g.40gb@4", idle))
    done = wait_until(lambda: [a for a in cluster.audit()["allocations"]
                               if a["job_id"] == "relayout-busy" and a["client_status"] in ("failed", "complete")],
                      what="the apply job ends")
    assert done[0]["client_status"] == "failed"
    assert cluster.audit()["mig_changes"] == [] and ids_of(cluster) == gpus


def test_never_fingerprinted_changes_stay_invisible(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(cluster_spec(delay="never"), speed=100.0)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    (node,) = cluster.node_ids().values()
    gpus = ids_of(cluster)
    _, g1 = sorted(gpus)
    idle = [gpus[g1][p] for p in ("1g.10gb@4", "1g.10gb@5", "1g.10gb@6")]
    submit(client, apply_job("relayout-2", node, g1, "3g.40gb@0,3g.40gb@4", idle))
    wait_until(lambda: cluster.audit()["mig_changes"], what="the change")
    assert layout(cluster)[g1] == LAYOUT


def test_destroying_an_instance_held_by_an_allocation_not_yet_running_is_counted() -> None:
    gpu = MigGpu("GPU-a", "NVIDIA H100 80GB HBM3", 81920, "00000000:07:00.0",
                 [Instance("MIG-0", "3g.40gb", 0, 4), *(Instance(f"MIG-{s}", "1g.10gb", s, 1) for s in (4, 5, 6))])
    cmd = ApplyCommand("GPU-a", ("3g.40gb@0", "3g.40gb@4"), frozenset({"MIG-4", "MIG-5", "MIG-6"}), False)
    # Running: NVML lists its processes and refuses (exit 3, nothing changed).
    refused = apply(gpu, cmd, {"MIG-5": True}, lambda: "MIG-new")
    assert refused.exit_code == 3 and gpu.layout() == LAYOUT
    # Placed but not started: no process yet, so NVML lets it go; the audit counts it.
    done = apply(gpu, cmd, {"MIG-5": False}, lambda: "MIG-new")
    assert done.exit_code == 0 and done.destroyed_in_use == 1 and gpu.layout() == ["3g.40gb@0", "3g.40gb@4"]
