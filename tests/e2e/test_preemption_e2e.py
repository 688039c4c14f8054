"""Preemption end to end (DESIGN 17), judged by the dev cluster's audit: a node full of exploratory jobs and
one training job that is not preemptible, then a serving job of the same team. It runs within
`preempt_after` + grace / speed + 5 s of real time; the victims are stopped with their grace, queued again
and later complete; the training job is never stopped; no device ever has two tenants; a cancel of the
preemptor while its victims stop requeues each victim once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests
from harness import overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.preemption import PreemptionPolicy
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.preemptconfig import TakeBackSettings
from nomad_gpu.store.entries import parse_job_id

pytestmark = pytest.mark.e2e

SPEED = 20.0
GRACE_S = 20.0
PREEMPT_AFTER_S = 1.0
FOUR: dict[str, Any] = {"name": "four", "nodes": [
    {"name": "n1", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 4, "memory_mib": 81920}]}]}
POLICY = TakeBackSettings(PreemptionPolicy(min_runtime_s=0.0, preempt_after_s=PREEMPT_AFTER_S))


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
