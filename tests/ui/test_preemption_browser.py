"""Preemption on the dashboard, in headless Chromium: a node full of exploratory work, then a serving job of
the same team; the victim's row says `preempting` and who takes its GPU while Nomad stops it, and the
serving job's row says which entries it waits for. Checked against the API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from conftest import ROOT_TOKEN
from test_dashboard_browser import open_dashboard, row, wait_until

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.preemption import PreemptionPolicy
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.preemptconfig import TakeBackSettings
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings

pytestmark = pytest.mark.e2e

ONE: dict[str, Any] = {"name": "one", "nodes": [
    {"name": "n1", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, ServiceRuntime]]:
    dc = DevCluster(ONE, speed=5.0, heartbeat_s=1.0)  # a 30 s grace is 6 s of wall time
    nomad_url = dc.start()
    scheduling = SchedulingSettings(tick_s=0.5, take_back=TakeBackSettings(PreemptionPolicy(min_runtime_s=0,
                                                                                            preempt_after_s=0)))
    runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address=nomad_url), scheduling=scheduling,
                                             db_path=str(tmp_path_factory.mktemp("ui") / "queue.db"),
                                             listen="http://127.0.0.1:0", token=ROOT_TOKEN))
    runtime.start(wait_ready_s=10)
    yield dc, runtime
    runtime.stop()
    dc.stop()


def submit(runtime: ServiceRuntime, text: str) -> str:
    r = requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), timeout=10,
                      headers={"Authorization": f"Bearer {ROOT_TOKEN}", "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return str(r.json()["entries"][0]["id"])


def spec(name: str, cls: str, extra: str = "") -> str:
    return (f"name: {name}\nteam: vision\nclass: {cls}\ntask: {{image: busybox}}\ngpu: {{count: 1}}\n"
            f"resources: {{cpu: 1000, memory: 1024}}\ndev: {{duration_s: 600}}\n{extra}")


def test_a_preempting_entry_and_its_preemptor_say_so(browser: Any, stack: tuple[DevCluster, ServiceRuntime]) -> None:
    _, runtime = stack
    open_dashboard(browser, runtime)
    victim = submit(runtime, spec("notebook", "exploratory", "checkpoint: {grace: 30s}\n"))
    wait_until(lambda: (r := row(browser, victim)) and r["state"] == "running", "the exploratory job running")
    serving = submit(runtime, spec("chat", "serving"))
    shown = wait_until(lambda: (r := row(browser, victim)) and r["state"] == "preempting" and r, "the victim's row",
                       timeout_s=10)
    assert f"preempted by {serving} (serving) on n1" in shown["why"]
    waiting = wait_until(lambda: (r := row(browser, serving)) and r["why"].startswith("preempting") and r,
                         "the preemptor's row", timeout_s=10)
    assert f"preempting {victim} on node" in waiting["why"]
    api = requests.get(f"{runtime.address}/v1/jobs/{victim}", timeout=5,
                       headers={"Authorization": f"Bearer {ROOT_TOKEN}"}).json()
    assert api["state"] in ("preempting", "queued")
