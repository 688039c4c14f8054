"""`nomad-gpu demo`: the case the product was designed around, end to end over real HTTP.

One node with 8 x A800-80GB (the dev cluster, in its own process), 66 one-GPU training jobs of
150 s each submitted at once through the service's API, time compressed by `speed`. Every figure
comes from the dev cluster's audit (what Nomad would have run), not from the service's own belief.
The service's answers are read as the API's payloads (`nomad_gpu.api.payloads`), as the CLI reads them.
"""

from __future__ import annotations

import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from nomad_gpu.api.payloads import Entries, Inventory
from nomad_gpu.bundled import bundled_cluster
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings

DEMO_CLUSTER = "seed-a800"
"""The bundled cluster the demo runs on (see nomad_gpu.bundled)."""


@dataclass(frozen=True)
class DemoConfig:
    cluster: Path = field(default_factory=lambda: bundled_cluster(DEMO_CLUSTER))
    jobs: int = 66
    duration_s: float = 150.0
    speed: float = 30.0
    jitter: float = 0.02
    """Training jobs take "about" 150 s: each job's duration is drawn within +-2 % (seeded), so that
    completions are not artificially simultaneous."""
    seed: int = 0
    timeout_s: float = 300.0
    nomad_version: str = ""
    """The Nomad release the dev cluster plays (`--nomad-version`); empty: its default."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_spec(i: int, duration_s: float) -> str:
    return (f"name: train-{i:03d}\nteam: research\n"
            "task: {image: nvcr.io/nvidia/pytorch:24.05-py3, command: python, args: [train.py]}\n"
            "resources: {cpu: 8000, memory: 65536}\n"
            f"gpu: {{count: 1}}\ndev: {{duration_s: {duration_s}}}\n")


def start_dev_cluster(cluster: Path, speed: float, nomad_version: str = "") -> tuple[subprocess.Popen[bytes], str]:
    """The dev cluster in its own process, as a real Nomad would be."""
    port = free_port()
    version = ["--nomad-version", nomad_version] if nomad_version else []
    proc = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "dev-cluster", "--cluster", str(cluster),
                             "--port", str(port), "--speed", str(speed), *version],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace").strip()
            raise RuntimeError(f"the dev cluster exited: {err.splitlines()[-1] if err else proc.returncode}")
        try:
            if requests.get(f"{url}/v1/nodes", timeout=1).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the dev cluster did not start within 30 s")


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    started = time.monotonic()
    proc, nomad_url = start_dev_cluster(cfg.cluster, cfg.speed, cfg.nomad_version)
    tmp = tempfile.mkdtemp(prefix="nomad-gpu-demo-")
    runtime = ServiceRuntime(ServiceSettings(
        nomad=NomadSettings(address=nomad_url), scheduling=SchedulingSettings(tick_s=1.0),
        db_path=os.path.join(tmp, "queue.db"), listen="http://127.0.0.1:0"))
    try:
        addr = runtime.start(wait_ready_s=10)
        session = requests.Session()
        rng = random.Random(cfg.seed)
        durations = [cfg.duration_s * (1 + cfg.jitter * rng.uniform(-1, 1)) for _ in range(cfg.jobs)]
        for i, duration in enumerate(durations):
            r = session.post(f"{addr}/v1/jobs", data=job_spec(i, round(duration, 3)).encode(),
                             headers={"Content-Type": "application/yaml"}, timeout=10)
            r.raise_for_status()
        deadline = time.monotonic() + cfg.timeout_s
        while time.monotonic() < deadline:
            entries = Entries.from_json(session.get(f"{addr}/v1/jobs", timeout=10).json()).entries
            if all(e.state in ("complete", "failed", "cancelled") for e in entries):
                break
            time.sleep(0.25)
        audit = session.get(f"{nomad_url}/_dev/audit", timeout=10).json()
        inventory = Inventory.from_json(session.get(f"{addr}/v1/inventory", timeout=10).json())
        gpus = sum(len(n.gpus) for n in inventory.nodes)
    finally:
        runtime.stop()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    report = summarise(audit, gpus=gpus, jobs=cfg.jobs, duration_s=cfg.duration_s, speed=cfg.speed)
    report["wall_s"] = round(time.monotonic() - started, 2)
    if cfg.nomad_version:
        report["nomad_version"] = cfg.nomad_version
    return report


def summarise(audit: dict[str, Any], *, gpus: int, jobs: int, duration_s: float, speed: float) -> dict[str, Any]:
    """Facts from the audit: completions, overlaps on one device, peak use, utilisation, handoffs."""
    allocs = [a for a in audit["allocations"] if a.get("started_at") is not None]
    done = [a for a in allocs if a["client_status"] == "complete"]
    by_device: dict[str, list[dict[str, Any]]] = {}
    for a in allocs:
        for dev in a["device_ids"]:
            by_device.setdefault(dev, []).append(a)
    overlaps = 0
    handoffs: list[float] = []
    for runs in by_device.values():
        runs.sort(key=lambda a: a["started_at"])
        for prev, nxt in zip(runs, runs[1:], strict=False):
            prev_end = prev["finished_at"] if prev["finished_at"] is not None else math.inf
            if nxt["started_at"] < prev_end - 1e-9:
                overlaps += 1
            elif prev.get("terminal_event_at") is not None and nxt["registered_at"] >= prev["terminal_event_at"]:
                handoffs.append((nxt["registered_at"] - prev["terminal_event_at"]) * 1000.0)
    events = sorted([(a["started_at"], 1, len(a["device_ids"])) for a in allocs]
                    + [(a["finished_at"], 0, -len(a["device_ids"])) for a in allocs if a["finished_at"] is not None])
    peak = level = 0
    for _, _, delta in events:
        level += delta
        peak = max(peak, level)
    first = min((a["started_at"] for a in allocs), default=0.0)
    last = max((a["finished_at"] or 0.0 for a in allocs), default=0.0)
    makespan = (last - first) * speed
    busy = sum(((a["finished_at"] or 0.0) - a["started_at"]) * speed * len(a["device_ids"]) for a in done)
    ideal = math.ceil(jobs / max(gpus, 1)) * duration_s
    return {
        "jobs_total": jobs, "jobs_completed": len({a["job_id"] for a in done}),
        "double_bookings": overlaps + int(audit.get("double_bookings_refused", 0)),
        "double_bookings_refused_by_nomad": int(audit.get("double_bookings_refused", 0)),
        "peak_gpus_in_use": peak, "gpus": gpus, "speed": speed,
        "makespan_s": round(makespan, 1), "ideal_makespan_s": round(ideal, 1),
        "gpu_utilization": round(busy / (gpus * makespan), 4) if makespan else 0.0,
        "ideal_gpu_utilization": round(jobs * duration_s / (gpus * ideal), 4) if ideal else 0.0,
        "handoffs": len(handoffs),
        "handoff_ms_p50": round(_pct(handoffs, 0.50), 2), "handoff_ms_p99": round(_pct(handoffs, 0.99), 2),
        "handoff_ms_max": round(max(handoffs, default=0.0), 2),
    }


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]
