"""End to end in another namespace (the real-Nomad issue, section 3): python-nomad's `?namespace=` wins
over the job's own on register (`command/agent/job_endpoint.go`, v2.0.5), so each call names the entry's
namespace, and the service follows allocations with `namespace=*`."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings, ServiceSettings

YAML = {"Content-Type": "application/yaml", "X-Nomad-Gpu-Client": "test"}
SPEC = "name: ns-job\nteam: t\nnamespace: ml\ntask: {image: busybox}\ngpu: {count: 1}\n"


@pytest.mark.e2e
def test_a_job_in_another_namespace_is_followed_and_stopped_there(tmp_path: Path) -> None:
    cluster = {"name": "ns", "namespaces": ["default", "ml"],
               "nodes": [{"name": "n1", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}
    with DevCluster(cluster, speed=50) as dc:
        runtime = ServiceRuntime(ServiceSettings(
            nomad=NomadSettings(address=dc.url, namespace="default"), scheduling=SchedulingSettings(tick_s=0.5),
            access=AccessSettings(namespaces=frozenset({"ml"})), db_path=str(tmp_path / "q.db"),
            listen="http://127.0.0.1:0"))
        runtime.start(wait_ready_s=10)
        try:
            r = requests.post(f"{runtime.address}/v1/jobs", data=SPEC + "dev: {duration_s: 20}\n", headers=YAML,
                              timeout=10)
            assert r.status_code == 201, r.text
            entry = r.json()["entries"][0]
            wait_for(lambda: requests.get(f"{runtime.address}/v1/jobs/{entry['id']}", timeout=5).json()["state"]
                     == "complete", what="the ml job to complete")
            allocs = [a for a in dc.audit()["allocations"] if a["job_id"].endswith(entry["id"])]
            assert [a["namespace"] for a in allocs] == ["ml"] and allocs[0]["client_status"] == "complete"
            # a cancelled one is stopped in its own namespace (a stop in `default` would be a 200 that does nothing)
            r = requests.post(f"{runtime.address}/v1/jobs", data=SPEC + "dev: {duration_s: 5000}\n", headers=YAML,
                              timeout=10)
            long = r.json()["entries"][0]
            wait_for(lambda: requests.get(f"{runtime.address}/v1/jobs/{long['id']}", timeout=5).json()["state"]
                     == "running", what="the second ml job running")
            requests.delete(f"{runtime.address}/v1/jobs/{long['id']}", headers=YAML, timeout=5).raise_for_status()
            job_id = requests.get(f"{runtime.address}/v1/jobs/{long['id']}", timeout=5).json()["nomad_job_id"]
            wait_for(lambda: requests.get(f"{dc.url}/v1/job/{job_id}", params={"namespace": "ml"},
                                          timeout=5).json()["Stop"], what="its job stopped in its namespace")
        finally:
            runtime.stop()
