"""Preemption end to end (DESIGN 17), judged by the dev cluster's audit: a node full of exploratory jobs and
one training job that is not preemptible, then a serving job of the same team. It runs within
`preempt_after` + grace / speed + 5 s of real time; the victims are stopped with their grace, queued again
and later complete; the training job is never stopped; no device ever has two tenants; a cancel of the
preemptor while its victims stop requeues each victim once."""

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
from harness import overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.preemption import PreemptionPolicy
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.preemptconfig import TakeBackSettings
from nomad_gpu.store.entries import parse_job_id

pytestmark = pytest.mark.e2e

SPEED = 20.0
GRACE_S = 20.0
PREEMPT_AFTER_S = 1.0
FOUR: dict[str, Any] = {"name": "four", "nodes": [
    {"name": "n1", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 4, "memory_mib": 81920}]}]}
POLICY = TakeBackSettings(PreemptionPolicy(min_runtime_s=0.0, preempt_after_s=PREEMPT_AFTER_S))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(name: str, cls: str, duration_s: float, gpus: int = 1, extra: str = "") -> str:
    return spec(name, duration_s=duration_s, gpus=gpus, extra=f"class: {cls}\n{extra}")


def _entry(runtime: ServiceRuntime, entry_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{runtime.address}/v1/jobs/{entry_id}", timeout=5).json())


def _runs(audit: dict[str, Any], entry_id: str) -> list[dict[str, Any]]:
    return [a for a in audit["allocations"] if (ref := parse_job_id(a["job_id"])) is not None
            and ref.entry == entry_id]


def _fill(runtime: ServiceRuntime) -> tuple[str, list[str]]:
    training = submit(runtime, _job("train", "training", 200.0))[0]["id"]  # no checkpoint: not preemptible
    explore = [submit(runtime, _job(f"x{k}", "exploratory", 100.0, extra=f"checkpoint: {{grace: {GRACE_S:g}s}}\n"))
               [0]["id"] for k in range(3)]
    wait_for(lambda: all(_entry(runtime, i)["state"] == "running" for i in [training, *explore]),
             what="the node full")
    return training, explore


def test_serving_preempts_exploratory_work_within_its_bound(tmp_path: Path) -> None:
    with DevCluster(FOUR, speed=SPEED, heartbeat_s=1.0) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db", take_back=POLICY)
        try:
            training, explore = _fill(runtime)
            t0 = time.monotonic()
            serving = submit(runtime, _job("chat", "serving", 20.0))[0]["id"]
            bound = PREEMPT_AFTER_S + GRACE_S / SPEED + 5.0
            wait_for(lambda: _entry(runtime, serving)["state"] in ("running", "complete"), timeout_s=bound,
                     what=f"the serving job running within {bound:g} s")
            took = time.monotonic() - t0
            victims = [i for i in explore if _entry(runtime, i)["preemptions"] == 1]
            assert len(victims) == 1, [_entry(runtime, i) for i in explore]
            assert _entry(runtime, victims[0])["reason"].startswith(f"preempted by {serving} (serving) on n1")
            stopped = runtime.scheduler.store.get(victims[0])
            first_job = stopped.nomad_job_id.rsplit("-", 1)[0]  # its first attempt's job, as Nomad holds it
            (task,) = requests.get(f"{dc.url}/v1/job/{first_job}", timeout=5).json()["TaskGroups"][0]["Tasks"]
            assert (task["KillSignal"], task["KillTimeout"]) == ("SIGTERM", int(GRACE_S * 10**9))
            wait_for(lambda: all(_entry(runtime, i)["state"] == "complete" for i in [serving, *explore]),
                     timeout_s=30, what="the serving job and every exploratory job complete")
            metrics = requests.get(f"{runtime.address}/metrics", timeout=5).text
            assert 'nomad_gpu_preemptions_total{class="exploratory",team="e2e"} 1.0' in metrics
        finally:
            runtime.stop()
        audit = dc.audit()
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        (train_run,) = _runs(audit, training)
        assert train_run["desired_status"] == "run", "the training job was never stopped"
        first, *again = _runs(audit, victims[0])
        assert first["desired_status"] == "stop" and again and again[-1]["client_status"] == "complete"
        (served,) = _runs(audit, serving)
        assert served["started_at"] >= first["finished_at"], "the preemptor started only after its victim ended"
        assert set(served["device_ids"]) == set(first["device_ids"])
        print(f"serving running {took:.2f} s after its submission (bound {bound:g} s)")


def test_a_cancel_of_the_preemptor_while_victims_stop_requeues_each_once(tmp_path: Path) -> None:
    with DevCluster(FOUR, speed=SPEED, heartbeat_s=1.0) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db", take_back=POLICY)
        try:
            _, explore = _fill(runtime)
            serving = submit(runtime, _job("chat", "serving", 20.0, gpus=2))[0]["id"]
            wait_for(lambda: sum(_entry(runtime, i)["state"] == "preempting" for i in explore) == 2,
                     what="two victims preempting")
            assert requests.delete(f"{runtime.address}/v1/jobs/{serving}", timeout=5).status_code == 200
            wait_for(lambda: all(_entry(runtime, i)["state"] == "complete" for i in explore), timeout_s=30,
                     what="every exploratory job complete")
            status = requests.get(f"{runtime.address}/v1/status", timeout=5).json()
            assert status["holds"] == {} and status["preemptions"] == []
            assert sorted(_entry(runtime, i)["attempts"] for i in explore) == [0, 1, 1]
        finally:
            runtime.stop()
        audit = dc.audit()
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        assert _runs(audit, serving) == [], "the cancelled preemptor never ran"
        assert sorted(len(_runs(audit, i)) for i in explore) == [1, 2, 2]


HEADERS = {"Content-Type": "application/yaml", "X-Nomad-Gpu-Client": "e2e"}


def _serve(url: str, db: Path, addr: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NOMAD_ADDR": url}
    env.pop("NOMAD_TOKEN", None)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", str(db), "--listen",
                                 addr, "--config", str(db.parent / "config.yaml")], env=env, stdout=out, stderr=out)
    wait_for(lambda: _ready(addr) or proc.poll() is not None, what="the service ready")
    assert proc.poll() is None, log.read_text()
    return proc


def _ready(addr: str) -> bool:
    try:
        return bool(requests.get(f"{addr}/v1/status", timeout=1).json().get("ready"))
    except (requests.RequestException, ValueError):
        return False


def test_a_kill_9_while_victims_stop_resumes_after_the_restart(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("tick_s: 0.5\npreemption: {min_runtime: 0s, preempt_after: 1s}\n")
    db, log = tmp_path / "q.db", tmp_path / "serve.log"
    addr = f"http://127.0.0.1:{free_port()}"
    with DevCluster(FOUR, speed=10.0, heartbeat_s=1.0) as dc:
        proc = _serve(dc.url, db, addr, log)
        try:
            ids = []
            for k in range(4):
                text = _job(f"x{k}", "exploratory", 60.0, extra="checkpoint: {grace: 30s}\n")
                r = requests.post(f"{addr}/v1/jobs", data=text.encode(), timeout=10, headers=HEADERS)
                ids.append(r.json()["entries"][0]["id"])
            state = lambda i: requests.get(f"{addr}/v1/jobs/{i}", timeout=5).json()  # noqa: E731
            wait_for(lambda: all(state(i)["state"] == "running" for i in ids), what="the node full")
            text = _job("chat", "serving", 10.0, gpus=2)
            serving = requests.post(f"{addr}/v1/jobs", data=text.encode(), timeout=10,
                                    headers=HEADERS).json()["entries"][0]["id"]
            wait_for(lambda: sum(state(i)["state"] == "preempting" for i in ids) == 2, what="two victims stopping")
            proc.send_signal(signal.SIGKILL)  # victims stopping, the preemptor not yet registered
            proc.wait(10)
            proc = _serve(dc.url, db, addr, log)
            wait_for(lambda: state(serving)["state"] in ("running", "complete"), timeout_s=20,
                     what="the preemptor running after the restart")
            try:
                wait_for(lambda: all(state(i)["state"] == "complete" for i in [serving, *ids]), timeout_s=40,
                         what="every job complete")
            except AssertionError:
                raise AssertionError([(state(i)["state"], state(i)["reason"]) for i in [serving, *ids]]) from None
            assert sorted(state(i)["attempts"] for i in ids) == [0, 0, 1, 1], "each victim queued again once"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        audit = dc.audit()
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        victims = [i for i in ids if len(_runs(audit, i)) == 2]
        assert len(victims) == 2
        (served,) = _runs(audit, serving)
        freed = {d for v in victims for d in _runs(audit, v)[0]["device_ids"]}
        assert set(served["device_ids"]) == freed, "the preemptor took the devices its victims freed"
        assert served["started_at"] >= max(_runs(audit, v)[0]["finished_at"] for v in victims)


MIG_NODE: dict[str, Any] = {"name": "mig", "nodes": [{"name": "m1", "gpus": [
    {"model": "NVIDIA H100 80GB HBM3", "count": 1, "memory_mib": 81920, "mig": ["1g.10gb"] * 7}]}]}


def test_serving_preempts_an_exploratory_mig_instance(tmp_path: Path) -> None:
    with DevCluster(MIG_NODE, speed=SPEED, heartbeat_s=1.0) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db", take_back=POLICY)
        try:
            mig = "mig: {profile: 1g.10gb}\ncheckpoint: {grace: 10s}\n"
            explore = [submit(runtime, spec(f"x{k}", duration_s=60.0, gpus=0, extra=f"class: exploratory\n{mig}"))
                       [0]["id"] for k in range(7)]
            wait_for(lambda: all(_entry(runtime, i)["state"] == "running" for i in explore), what="seven instances")
            serving = submit(runtime, spec("chat", duration_s=10.0, gpus=0,
                                           extra="class: serving\nmig: {profile: 1g.10gb}\n"))[0]["id"]
            wait_for(lambda: _entry(runtime, serving)["state"] in ("running", "complete"),
                     timeout_s=PREEMPT_AFTER_S + 10 / SPEED + 5.0, what="the serving job on a MIG instance")
            victims = [i for i in explore if _entry(runtime, i)["preemptions"] == 1]
            assert len(victims) == 1
            wait_for(lambda: all(_entry(runtime, i)["state"] == "complete" for i in [serving, *explore]),
                     timeout_s=30, what="every job complete")
        finally:
            runtime.stop()
        audit = dc.audit()
        assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
        (served,) = _runs(audit, serving)
        first = _runs(audit, victims[0])[0]
        assert served["device_ids"] == first["device_ids"] and served["device_ids"][0].startswith("MIG-")
        assert served["started_at"] >= first["finished_at"]
