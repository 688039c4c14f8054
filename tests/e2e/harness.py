"""End-to-end harness: the real service (HTTP API, watcher, actuator, SQLite) against the dev cluster.

Everything crosses real loopback HTTP and the real NDJSON event stream, framed as Nomad 2.0 frames it
unless a test asks for another version. Facts are read from the dev cluster's audit, never from the
service's own belief.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.version import DEFAULT_NOMAD_VERSION
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"
TERMINAL = ("complete", "failed", "cancelled")


def spec(name: str, *, duration_s: float = 2.0, gpus: int = 1, model: str | None = None, retries: int = 0,
         extra: str = "") -> str:
    models = f", models: [{model}]" if model else ""
    gpu = f"gpu: {{count: {gpus}{models}}}\n" if gpus else ""
    return (f"name: {name}\nteam: e2e\nretries: {retries}\ntask: {{image: busybox}}\n"
            f"resources: {{cpu: 1000, memory: 1024}}\n{gpu}dev: {{duration_s: {duration_s}}}\n{extra}")


def start_service(nomad_url: str, db_path: Path, **scheduling: Any) -> ServiceRuntime:
    settings = ServiceSettings(nomad=NomadSettings(address=nomad_url),
                               scheduling=SchedulingSettings(**{"tick_s": 0.5, **scheduling}),
                               db_path=str(db_path), listen="http://127.0.0.1:0")
    runtime = ServiceRuntime(settings)
    runtime.start(wait_ready_s=10)
    assert runtime.scheduler.ready.is_set(), "the service never reconciled with the dev cluster"
    return runtime


def submit(runtime: ServiceRuntime, text: str) -> list[dict[str, Any]]:
    r = requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), headers={"Content-Type": "application/yaml"},
                      timeout=10)
    assert r.status_code == 201, r.text
    return list(r.json()["entries"])


def entries(runtime: ServiceRuntime) -> list[dict[str, Any]]:
    return list(requests.get(f"{runtime.address}/v1/jobs", timeout=10).json()["entries"])


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def all_ended(runtime: ServiceRuntime) -> bool:
    return all(e["state"] in TERMINAL for e in entries(runtime))


def overlaps(audit: Mapping[str, Any]) -> int:
    """Allocations that held the same device at the same time (what must never happen)."""
    by_device: dict[str, list[tuple[float, float]]] = {}
    for a in audit["allocations"]:
        if a.get("started_at") is None:
            continue
        end = a["finished_at"] if a["finished_at"] is not None else float("inf")
        for dev in a["device_ids"]:
            by_device.setdefault(dev, []).append((a["started_at"], end))
    count = 0
    for runs in by_device.values():
        runs.sort()
        count += sum(1 for (_, end), (start, _) in zip(runs, runs[1:], strict=False) if start < end - 1e-9)
    return count


def allocs_per_job(audit: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in audit["allocations"]:
        out[a["job_id"]] = out.get(a["job_id"], 0) + 1
    return out


ONE_GPU: dict[str, Any] = {"name": "one", "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}
"""A cluster of one node with one GPU: what runs on it can only ever run one at a time."""

NOMAD_VERSIONS = ("2.0.5", "1.10.5")
"""The event stream's two framings: hijacked and close-delimited from 1.11.2, chunked before
(`command/agent/event_endpoint.go`, v2.0.5 and v1.11.1)."""


def dev_cluster(name: str, *, speed: float = 50.0, event_buffer: int = 100,
                nomad_version: str = DEFAULT_NOMAD_VERSION) -> DevCluster:
    """A started dev cluster playing `nomad_version` (by default the dev cluster's own, the newest 2.0)."""
    dc = DevCluster(CLUSTERS / f"{name}.yaml", speed=speed, event_buffer=event_buffer, heartbeat_s=1.0,
                    nomad_version=nomad_version)
    dc.start()
    return dc
