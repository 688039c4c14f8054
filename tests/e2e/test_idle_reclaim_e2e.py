"""Idle reclaim end to end, judged by the dev cluster's audit: an interactive session whose dev utilisation
is 0 is warned, then stopped with its grace when a job waits, and the waiting job runs on its GPU; with
nobody waiting it is only warned; `keep` postpones it; an active session is never stopped; a kill -9 of
the service mid-stop resumes (the devices stay booked until Nomad reports the session's allocation
terminal, then the waiting job gets them)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from harness import overlaps, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.idle import IdleAction, IdlePolicy
from nomad_gpu.service.config.idleconfig import idle_from_classes
from nomad_gpu.service.config.usageconfig import UsageSettings
from nomad_gpu.service.loops.reclaim import NOMAD_DEFAULT_KILL_TIMEOUT_S

pytestmark = pytest.mark.e2e

CLIENT = {"X-Nomad-Gpu-Client": "test"}


def session(name: str, util: str, *, gpus: int = 1, cls: str = "interactive") -> str:
    return (f"name: {name}\nteam: e2e\nclass: {cls}\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}"
            f"\ngpu: {{count: {gpus}}}\ndev: {{duration_s: 36000, gpu_util: {util}}}\n")


def waiter(name: str) -> str:
    return (f"name: {name}\nteam: e2e\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            "gpu: {count: 1}\ndev: {duration_s: 36000}\n")


def entry(addr: str, entry_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{addr}/v1/jobs/{entry_id}", timeout=5).json())


def alloc_of(audit: dict[str, Any], job_id: str) -> dict[str, Any]:
    (found,) = [a for a in audit["allocations"] if a["job_id"] == job_id]
    return dict(found)


def test_an_idle_session_is_warned_kept_then_stopped_for_a_waiting_job(seed: DevCluster, tmp_path: Path) -> None:
    speed = 10.0  # the seed cluster's: a 5 s kill_timeout takes 0.5 s here
    policy = IdlePolicy(after_s=2.0, warn_after_s=1.0, action=IdleAction.STOP)
    runtime = start_service(seed.url, tmp_path / "q.db", usage=UsageSettings(interval_s=0.2, timeout_s=2.0),
                            idle={**idle_from_classes(None), WorkloadClass.INTERACTIVE: policy})
    addr = runtime.address
    try:
        # 8 GPUs: a session busy for its first 5 dev-cluster seconds and then idle, a busy one (90 %) and a
        # 6-GPU training run (never judged) fill them
        (lazy,) = submit(runtime, session("lazy", "[[0, 80], [5, 0]]"))
        (busy,) = submit(runtime, session("busy", "[[0, 90]]"))
        (train,) = submit(runtime, session("train", "0", gpus=6, cls="training"))
        wait_for(lambda: all(entry(addr, e["id"])["state"] == "running" for e in (lazy, busy, train)), 20,
                 "the three to run")
        wait_for(lambda: "will be stopped" in ((entry(addr, lazy["id"])["usage"] or {}).get("idle_note") or ""), 20,
                 "the lazy session's warning")
        wait_for(lambda: (entry(addr, lazy["id"])["usage"] or {}).get("idle_note", "").endswith(
            "will be stopped when a job is waiting"), 20, "its action to be due")
        time.sleep(1.0)  # several rounds with the action due and nobody waiting: only warned
        assert entry(addr, lazy["id"])["state"] == "running"
        assert (entry(addr, busy["id"])["usage"] or {}).get("idle_note", "") == ""
        assert (entry(addr, train["id"])["usage"] or {}).get("idle_note", "") == ""  # training: never judged

        kept = requests.post(f"{addr}/v1/jobs/{lazy['id']}/keep", json={"for": 3}, headers=CLIENT, timeout=5)
        assert kept.status_code == 200, kept.text
        (w1,) = submit(runtime, waiter("w1"))
        time.sleep(1.5)  # kept: a job waits, and still nothing is stopped
        assert entry(addr, lazy["id"])["state"] == "running" and entry(addr, w1["id"])["state"] == "queued"

        wait_for(lambda: entry(addr, lazy["id"])["state"] == "reclaimed", 20, "the reclaim once the keep ran out")
        stopped = entry(addr, lazy["id"])
        assert stopped["reason"].startswith("idle ") and stopped["reason"].endswith(f": stopped for {w1['id']}")
        wait_for(lambda: entry(addr, w1["id"])["state"] == "running", 20, "the waiting job to run")
        (w2,) = submit(runtime, waiter("w2"))  # waits for good: the busy session is never taken for it
        time.sleep(1.5)

        audit = seed.audit()
        lazy_alloc = alloc_of(audit, stopped["nomad_job_id"])
        w1_alloc = alloc_of(audit, entry(addr, w1["id"])["nomad_job_id"])
        assert lazy_alloc["client_status"] == "complete" and lazy_alloc["desired_status"] == "stop"
        grace = lazy_alloc["finished_at"] - stopped["finished_at"]
        assert grace >= NOMAD_DEFAULT_KILL_TIMEOUT_S / speed * 0.95, grace  # its tasks got their kill_timeout
        assert w1_alloc["device_ids"] == lazy_alloc["device_ids"]  # the waiting job runs on its GPU
        assert w1_alloc["started_at"] >= lazy_alloc["finished_at"]
        busy_alloc = alloc_of(audit, entry(addr, busy["id"])["nomad_job_id"])
        assert busy_alloc["client_status"] == "running" and entry(addr, busy["id"])["state"] == "running"
        assert entry(addr, w2["id"])["state"] == "queued"
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0

        rows = requests.get(f"{addr}/v1/usage?by=class&since=1d", timeout=5).json()["rows"]
        (row,) = [r for r in rows if r["key"] == "interactive"]
        assert row["reclaims"] == 1 and row["idle_gpu_hours"] > 0 and row["reclaimed_gpu_hours"] > 0
        metrics = requests.get(f"{addr}/metrics", timeout=5).text
        assert 'nomad_gpu_idle_reclaimed_total{action="stop"} 1.0' in metrics
    finally:
        runtime.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(db: Path, config: Path, addr: str, nomad: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NOMAD_ADDR": nomad}
    env.pop("NOMAD_TOKEN", None)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", str(db), "--listen",
                                 addr, "--config", str(config)], env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{addr}/v1/status", timeout=1).json().get("ready"):
                return proc
        except (requests.RequestException, ValueError):
            pass
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(f"the service was not ready in 30 s: {log.read_text()}")


def test_a_kill_9_mid_stop_resumes_and_the_waiting_job_gets_the_gpu(tmp_path: Path) -> None:
    # one GPU at speed 2: the session's 5 s kill_timeout is 2.5 real seconds, time enough to kill the service
    dc = DevCluster({"name": "one", "nodes": [{"name": "n1", "gpus": [{"model": "NVIDIA A100-SXM4-80GB",
                                                                        "memory_mib": 81920}]}]}, speed=2.0)
    dc.start()
    config = tmp_path / "config.yaml"
    config.write_text("usage: {interval_s: 0.2, timeout_s: 2}\n"
                      "classes:\n  interactive: {idle: {after: 1, warn_after: 0.5, action: stop}}\n")
    addr = f"http://127.0.0.1:{_free_port()}"
    proc = _serve(tmp_path / "q.db", config, addr, dc.url, tmp_path / "service.log")
    try:
        headers = {"Content-Type": "application/yaml", **CLIENT}
        lazy = requests.post(f"{addr}/v1/jobs", data=session("lazy", "0"), headers=headers, timeout=5).json()
        lazy_id = lazy["entries"][0]["id"]
        wait_for(lambda: entry(addr, lazy_id)["state"] == "running", 20, "the session to run")
        w = requests.post(f"{addr}/v1/jobs", data=waiter("w"), headers=headers, timeout=5).json()["entries"][0]
        wait_for(lambda: entry(addr, lazy_id)["state"] == "reclaimed", 20, "the reclaim")
        proc.send_signal(signal.SIGKILL)  # mid-stop: Nomad is still giving the session its kill_timeout
        proc.wait(10)
        audit = dc.audit()
        (session_alloc,) = [a for a in audit["allocations"] if a["job_id"].endswith(lazy_id)]
        assert session_alloc["client_status"] == "running", "the kill did not land mid-stop"
        proc = _serve(tmp_path / "q.db", config, addr, dc.url, tmp_path / "service.log")
        wait_for(lambda: entry(addr, w["id"])["state"] == "running", 30, "the waiting job to run after the restart")
        audit = dc.audit()
        job, entry_job = entry(addr, lazy_id), entry(addr, w["id"])
        lazy_alloc, w_alloc = alloc_of(audit, job["nomad_job_id"]), alloc_of(audit, entry_job["nomad_job_id"])
        assert job["state"] == "reclaimed" and lazy_alloc["client_status"] == "complete"
        assert w_alloc["device_ids"] == lazy_alloc["device_ids"] and w_alloc["started_at"] >= lazy_alloc["finished_at"]
        assert lazy_alloc["finished_at"] - job["finished_at"] >= NOMAD_DEFAULT_KILL_TIMEOUT_S / 2.0 * 0.95
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        dc.stop()
