"""The service with a token Nomad refuses the event stream (2.x: `200 OK` then a close before the
first heartbeat): its status and metrics say `forbidden` instead of reconnecting quietly forever."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.acl import AclToken
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings

CLUSTER = {"name": "acl", "namespaces": ["ml"], "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}


@pytest.mark.e2e
def test_status_and_metrics_show_a_refused_stream(tmp_path: Path) -> None:
    tokens = (AclToken("ml-only", {"ml": ("write",)}, node="read"),)
    with DevCluster(CLUSTER, speed=50, heartbeat_s=0.5, acl_tokens=tokens) as dc:
        runtime = ServiceRuntime(ServiceSettings(
            nomad=NomadSettings(address=dc.url, token="ml-only"), scheduling=SchedulingSettings(tick_s=0.5),
            db_path=str(tmp_path / "q.db"), listen="http://127.0.0.1:0"))
        runtime.start(wait_ready_s=10)
        try:
            wait_for(lambda: requests.get(f"{runtime.address}/v1/status", timeout=5).json().get("event_stream")
                     == "forbidden", what="the status to say forbidden")
            metrics = requests.get(f"{runtime.address}/metrics", timeout=5).text
            assert "nomad_gpu_event_stream_forbidden 1.0" in metrics
        finally:
            runtime.stop()
