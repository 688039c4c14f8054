"""Sweeps as throttled job arrays, and GPUs taken by plain Nomad jobs that nomad-gpu did not send."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import all_ended, dev_cluster, entries, overlaps, spec, start_service, submit, wait_for

pytestmark = pytest.mark.e2e

SWEEP = """
kind: sweep
name: lr-sweep
team: research
task: {image: busybox}
resources: {cpu: 1000, memory: 1024}
gpu: {count: 1}
dev: {duration_s: 5}
sweep:
  parameters: {lr: [0.1, 0.01, 0.001], batch: [32, 64]}
  max_parallel: 2
"""


def max_concurrent(allocs: list[dict[str, object]]) -> int:
    events = sorted([(float(a["started_at"]), 1) for a in allocs if a.get("started_at") is not None]  # type: ignore[arg-type]
                    + [(float(a["finished_at"]), -1) for a in allocs if a.get("finished_at") is not None])  # type: ignore[arg-type]
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def test_a_sweep_never_runs_more_trials_than_max_parallel(tmp_path: Path) -> None:
    dc = dev_cluster("seed-a800", speed=10.0)
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        trials = submit(runtime, SWEEP)
        assert len(trials) == 6 and len({t["sweep"] for t in trials}) == 1
        wait_for(lambda: all_ended(runtime), 30, "the sweep to end")
        sweep = requests.get(f"{runtime.address}/v1/sweeps/{trials[0]['sweep']}", timeout=5).json()
        assert sweep["states"] == {"complete": 6}
    finally:
        runtime.stop()
        dc.stop()
    audit = dc.audit()
    assert max_concurrent(audit["allocations"]) == 2  # 8 GPUs free, yet only two trials at once
    assert overlaps(audit) == 0


def test_gpus_held_by_plain_nomad_jobs_are_never_double_booked(tmp_path: Path) -> None:
    dc = dev_cluster("seed-a800", speed=10.0)
    hcl = ('job "plain" {\n  type = "batch"\n  datacenters = ["dc1"]\n  meta { nomad_gpu_dev_duration_s = "30" }\n'
           '  group "g" {\n    task "t" {\n      driver = "docker"\n      config { image = "x" }\n'
           '      resources {\n        cpu = 100\n        memory = 100\n        device "nvidia/gpu" { count = 3 }\n'
           '      }\n    }\n  }\n}\n')
    job = requests.post(f"{dc.url}/v1/jobs/parse", json={"JobHCL": hcl}, timeout=5).json()
    assert requests.post(f"{dc.url}/v1/jobs", json={"Job": job}, timeout=5).status_code == 200
    runtime = start_service(dc.url, tmp_path / "q.db")
    try:
        for i in range(8):
            submit(runtime, spec(f"job-{i}", duration_s=5.0))
        wait_for(lambda: sum(e["state"] == "running" for e in entries(runtime)) == 5, 20, "5 of ours running")
        assert sum(e["state"] == "queued" for e in entries(runtime)) == 3  # the plain job holds 3 GPUs
        wait_for(lambda: all_ended(runtime), 40, "all to end")
    finally:
        runtime.stop()
        dc.stop()
    audit = dc.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
