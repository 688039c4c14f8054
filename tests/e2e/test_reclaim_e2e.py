"""Reclaim end to end (issue 34), judged by the dev cluster's audit: vision is idle and lends its quota; nlp
borrows it with preemptible work; vision submits; nlp's borrowed jobs are stopped with their grace, vision's
run on the freed GPUs, nlp's run again later; nlp's jobs within its own quota are never touched; no device
ever has two tenants; a kill -9 of the service mid-reclaim resumes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from harness import overlaps, spec, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.store.entries import parse_job_id

pytestmark = pytest.mark.e2e

FOUR: dict[str, Any] = {"name": "four", "nodes": [
    {"name": "n1", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 4, "memory_mib": 81920}]}]}
CONFIG = {"tick_s": 0.5, "teams": {"vision": {"quota_gpu": 2, "cohort": "research"},
                                   "nlp": {"quota_gpu": 2, "borrow_gpu": 2, "cohort": "research"}}}
HEADERS = {"Content-Type": "application/yaml"}


def _job(name: str, team: str, cls: str, duration_s: float, extra: str = "", gpus: int = 1) -> str:
    text = spec(name, duration_s=duration_s, gpus=gpus, extra=f"class: {cls}\n{extra}")
    return text.replace("team: e2e", f"team: {team}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(url: str, tmp: Path, addr: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NOMAD_ADDR": url}
    env.pop("NOMAD_TOKEN", None)
    with open(tmp / "serve.log", "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", str(tmp / "q.db"),
                                 "--listen", addr, "--config", str(tmp / "config.yaml")], env=env, stdout=out,
                                stderr=out)
    wait_for(lambda: _ready(addr) or proc.poll() is not None, what="the service ready")
    assert proc.poll() is None, (tmp / "serve.log").read_text()
    return proc


def _ready(addr: str) -> bool:
    try:
        return bool(requests.get(f"{addr}/v1/status", timeout=1).json().get("ready"))
    except (requests.RequestException, ValueError):
        return False


def _post(addr: str, text: str) -> str:
    r = requests.post(f"{addr}/v1/jobs", data=text.encode(), timeout=10, headers=HEADERS)
    assert r.status_code == 201, r.text
    return str(r.json()["entries"][0]["id"])


def _runs(audit: dict[str, Any], entry_id: str) -> list[dict[str, Any]]:
    return [a for a in audit["allocations"] if (ref := parse_job_id(a["job_id"])) is not None
            and ref.entry == entry_id]


@pytest.mark.parametrize("kill_midway", [False, True], ids=["plain", "kill-9-mid-reclaim"])
def test_a_lender_gets_its_lent_gpus_back_from_the_borrowers_newest_work(tmp_path: Path, kill_midway: bool) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    addr = f"http://127.0.0.1:{_free_port()}"
    with DevCluster(FOUR, speed=20.0, heartbeat_s=1.0) as dc:
        proc = _serve(dc.url, tmp_path, addr)
        state = lambda i: requests.get(f"{addr}/v1/jobs/{i}", timeout=5).json()  # noqa: E731
        try:
            nlp = []
            for k in range(4):  # one at a time, so that the two borrowed ones are the two newest
                nlp.append(_post(addr, _job(f"n{k}", "nlp", "exploratory", 120.0, "checkpoint: {grace: 20s}\n")))
                wait_for(lambda: state(nlp[-1])["state"] == "running", what=f"n{k} running")
            status = requests.get(f"{addr}/v1/status", timeout=5).json()
            assert status["team_borrowed_gpu"] == {"nlp": 2.0}
            vision = [_post(addr, _job("v", "vision", "training", 20.0, gpus=2))]  # one plan per node at a time
            wait_for(lambda: sum(state(i)["state"] == "preempting" for i in nlp) == 2, what="two borrowed jobs "
                     "stopping")
            assert {i for i in nlp if state(i)["state"] == "preempting"} == set(nlp[2:])
            if kill_midway:  # the borrowed jobs stopping, vision's not yet registered
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                proc = _serve(dc.url, tmp_path, addr)
            wait_for(lambda: all(state(i)["state"] in ("running", "complete") for i in vision), timeout_s=20,
                     what="vision's jobs running on the freed GPUs")
            reason = state(nlp[3])["reason"]
            assert "reclaim of team vision's lent quota" in reason, reason
            wait_for(lambda: all(state(i)["state"] == "complete" for i in [*nlp, *vision]), timeout_s=60,
                     what="every job complete")
            assert [state(i)["attempts"] for i in nlp] == [0, 0, 1, 1], "each borrowed job queued again once"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        audit = dc.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    for own in nlp[:2]:
        (run,) = _runs(audit, own)
        assert run["desired_status"] == "run", "work within nlp's own quota is never stopped"
    stopped = [_runs(audit, i)[0] for i in nlp[2:]]
    assert all(s["desired_status"] == "stop" for s in stopped)
    freed = {d for s in stopped for d in s["device_ids"]}
    for v in vision:
        (run,) = _runs(audit, v)
        assert set(run["device_ids"]) <= freed and run["started_at"] >= min(s["finished_at"] for s in stopped)
