"""An entry as Nomad holds it, end to end: its allocation, the HCL Nomad stored, its logs through the
service (and `logs -f` through the CLI) from the dev cluster's client filesystem API."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import spec, start_service, submit, wait_for

from nomad_gpu.cli.api_client import ApiClient
from nomad_gpu.cli.control import follow_logs
from nomad_gpu.devcluster import DevCluster

pytestmark = pytest.mark.e2e


def test_allocations_hcl_and_logs_of_a_job(seed: DevCluster, tmp_path: Path) -> None:
    runtime = start_service(seed.url, tmp_path / "q.db")
    try:
        (entry,) = submit(runtime, spec("detail", duration_s=20.0, gpus=2))
        base = f"{runtime.address}/v1/jobs/{entry['id']}"

        def state() -> str:
            return str(requests.get(base, timeout=5).json()["state"])

        wait_for(lambda: state() == "running", 20, "the entry to run")
        written: list[bytes] = []
        follow_logs(ApiClient(runtime.address), entry["id"], "stdout", True, write=written.append, where={})
        text = b"".join(written).decode()
        assert text.splitlines()[-1] == "main: done, exit code 0", text
        audit = [a for a in seed.audit()["allocations"] if a["job_id"] == entry["nomad_job_id"]]
        (alloc,) = audit
        assert f"main: NVIDIA_VISIBLE_DEVICES={','.join(alloc['device_ids'])}" in text

        wait_for(lambda: state() == "complete", 20, "the entry to complete")
        detail = requests.get(f"{base}/allocations", timeout=5).json()
        assert [(a["id"], a["client_status"]) for a in detail["allocations"]] == [(alloc["alloc_id"], "complete")]
        assert detail["nomad_ui"] == f"{seed.url}/ui/jobs/{entry['nomad_job_id']}@default"
        assert detail["ran_s"] is not None and detail["ran_s"] >= 1.0

        hcl = requests.get(f"{base}/hcl", timeout=5).json()
        assert hcl["format"] == "hcl2" and hcl["hcl"].lstrip().startswith(f'job "{entry["nomad_job_id"]}"')
        assert alloc["device_ids"][0] in hcl["hcl"], "the HCL Nomad stored pins the devices it chose"

        text = requests.get(f"{runtime.address}/metrics", timeout=5).text
        assert "nomad_gpu_wait_seconds_count 1.0" in text
        free = 'nomad_gpu_gpus{kind="whole",model="NVIDIA A800-SXM4-80GB",profile="",state="free"} 8.0'
        wait_for(lambda: free in requests.get(f"{runtime.address}/metrics", timeout=5).text, 10,
                 "every GPU free again in the metrics")
        assert "nomad_gpu_event_stream_reconnects_total" in text and 'nomad_gpu_entries{state="running"}' in text
    finally:
        runtime.stop()
