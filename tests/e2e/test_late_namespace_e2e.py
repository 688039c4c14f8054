"""A namespace created after the service subscribed to `namespace=*` (the real-Nomad issue, third round,
item 1): Nomad never sends its events on that stream (`nomad/event_endpoint.go` `validateACL`, v2.0.5),
so the watcher must notice the namespace and resubscribe; else the job is stopped and queued again at
the admission deadline, forever."""

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
CLUSTER = {"name": "late-ns", "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}


@pytest.mark.e2e
def test_a_job_in_a_namespace_created_after_the_subscription_completes(tmp_path: Path) -> None:
    with DevCluster(CLUSTER, speed=50, heartbeat_s=0.5) as dc:
        runtime = ServiceRuntime(ServiceSettings(
            nomad=NomadSettings(address=dc.url), scheduling=SchedulingSettings(tick_s=0.5),
            access=AccessSettings(namespaces=frozenset({"late"})), db_path=str(tmp_path / "q.db"),
            listen="http://127.0.0.1:0"))
        runtime.start(wait_ready_s=10)
        try:
            wait_for(lambda: dc.broker.subscriber_count > 0, what="the watcher's subscription")
            requests.post(f"{dc.url}/v1/namespace/late", json={"Name": "late"}, timeout=5).raise_for_status()
            spec = "name: late-job\nteam: t\nnamespace: late\ntask: {image: busybox}\ngpu: {count: 1}\n"
            r = requests.post(f"{runtime.address}/v1/jobs", data=spec + "dev: {duration_s: 50}\n", headers=YAML,
                              timeout=10)
            assert r.status_code == 201, r.text
            entry = r.json()["entries"][0]
            wait_for(lambda: requests.get(f"{runtime.address}/v1/jobs/{entry['id']}", timeout=5).json()["state"]
                     == "complete", timeout_s=40, what="the job in the new namespace to complete")
            assert runtime.watcher.namespace_resubscribes >= 1
        finally:
            runtime.stop()
        allocs = [a for a in dc.audit()["allocations"] if a["job_id"].endswith(entry["id"])]
        assert [(a["namespace"], a["client_status"]) for a in allocs] == [("late", "complete")]
