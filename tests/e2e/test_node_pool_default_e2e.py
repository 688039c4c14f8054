"""A spec that names no node pool runs only in a pool its token may use (issue 31, item 1).

On `mixed-fleet` (plus a MIG node and a shared-GPU node in `reserved`, so that every GPU kind has
capacity there), a token granted only `node_pools: [default]` submits specs without `node_pool`. Nomad
puts such a job in `default` (`nomad/job_endpoint_hook_node_pool_ce.go`, v2.0.5): the service must place
it there and nowhere else, whatever the kind (whole GPU, MIG, share, a class's choice). Judged from the
dev cluster: its audit (which node each allocation ran on) and each registered job's `NodePool`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from harness import CLUSTERS, overlaps, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings, access_from_mapping

pytestmark = pytest.mark.e2e

TOKEN = "vision-0123456789abcdef"
H100 = "NVIDIA H100 80GB HBM3"
RESERVED_EXTRA = [  # capacity of every kind in `reserved`, none of it offered in `default`
    {"name": "h100-mig-reserved", "datacenter": "dc2", "node_pool": "reserved", "node_class": "gpu-mig",
     "gpus": [{"model": H100, "count": 1, "memory_mib": 81920, "mig": ["2g.20gb", "2g.20gb", "2g.20gb"]}]},
    {"name": "shared-reserved", "datacenter": "dc1", "node_pool": "reserved", "node_class": "gpu-shared",
     "device_plugin": "nomad-gpu", "gpus": [{"model": "NVIDIA L40S", "count": 1, "memory_mib": 46068,
                                             "shared": True, "slots": 4}]},
]


def fleet() -> dict[str, Any]:
    cluster = yaml.safe_load((CLUSTERS / "mixed-fleet.yaml").read_text(encoding="utf-8"))
    return {**cluster, "name": "mixed-fleet", "nodes": [*cluster["nodes"], *RESERVED_EXTRA]}


def job(name: str, body: str) -> str:
    return (f"name: {name}\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            f"dev: {{duration_s: 3600}}\n{body}")


def post(runtime: ServiceRuntime, text: str) -> requests.Response:
    return requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), timeout=10,
                         headers={"Content-Type": "application/yaml", "Authorization": f"Bearer {TOKEN}"})


def entries(runtime: ServiceRuntime) -> dict[str, dict[str, Any]]:
    r = requests.get(f"{runtime.address}/v1/jobs", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    return {e["name"]: e for e in r.json()["entries"]}


def test_a_spec_without_a_pool_never_runs_in_a_pool_the_token_may_not_use(tmp_path: Path) -> None:
    access = access_from_mapping({"node_pools": ["default", "reserved"],
                                  "tokens": {TOKEN: {"team": "vision", "node_pools": ["default"]}}})
    with DevCluster(fleet(), speed=50.0, heartbeat_s=1.0) as dc:
        reserved = {i for n, i in dc.node_ids().items() if n.endswith("reserved") or n == "h200-reserved-1"}
        runtime = ServiceRuntime(ServiceSettings(
            nomad=NomadSettings(address=dc.url), scheduling=SchedulingSettings(tick_s=0.2),
            db_path=str(tmp_path / "q.db"), listen="http://127.0.0.1:0", access=access))
        runtime.start(wait_ready_s=10)
        try:
            # the fleet check judges the pool the job may use: only `reserved` has H200s
            r = post(runtime, job("h200", "gpu: {count: 1, models: [NVIDIA H200]}\n"))
            assert r.status_code == 422 and "unschedulable" in r.json()["error"], r.text
            assert "outside its node pool" in r.json()["error"]
            # the shared L40S in `default` taken whole, twice: the next share fits only in `reserved`
            for name in ("share-a", "share-b"):
                assert post(runtime, job(name, "share: {milli: 999}\n")).status_code == 201
            wait_for(lambda: all(entries(runtime)[n]["state"] == "running" for n in ("share-a", "share-b")), 20,
                     "the default pool's shared GPUs to be taken")
            waiting = {"whole": "gpu: {count: 1, models: [NVIDIA H200]}\n",
                       "mig": "mig: {profile: 2g.20gb}\n",
                       "share": "share: {milli: 250}\n",
                       "class": "class: training\ngpu_memory: 100GiB\n"}
            for name, body in waiting.items():
                r = post(runtime, job(name, body + "allow_unschedulable: true\n"))
                assert r.status_code == 201, r.text
            assert post(runtime, job("a100", "gpu: {count: 1, models: [NVIDIA A100-SXM4-80GB]}\n")).status_code == 201
            wait_for(lambda: entries(runtime)["a100"]["state"] == "running", 20, "the A100 job to run")
            # each has been decided (a cycle said why it waits) and none was placed: a placement would come first
            wait_for(lambda: all(entries(runtime)[n]["reason"] or entries(runtime)[n]["state"] != "queued"
                                 for n in waiting), 20, "a wait reason for each")
            seen = entries(runtime)
            assert {n: seen[n]["state"] for n in waiting} == dict.fromkeys(waiting, "queued")
            assert all("outside its" in seen[n]["reason"] for n in ("whole", "mig", "share")), seen
            audit = dc.audit()
            assert [a["job_id"] for a in audit["allocations"] if a["node_id"] in reserved] == []
            running = [e for e in seen.values() if e["state"] == "running"]
            assert sorted(e["name"] for e in running) == ["a100", "share-a", "share-b"]
            for e in running:  # the rendered job names the pool it was placed in
                registered = requests.get(f"{dc.url}/v1/job/{e['nomad_job_id']}", timeout=10).json()
                assert registered["NodePool"] == "default", e["name"]
            assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        finally:
            runtime.stop()
