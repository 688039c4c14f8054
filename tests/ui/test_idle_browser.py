"""The dashboard shows an idle session's clock, in headless Chromium: the entry's row reads what its
`usage.idle_note` says (`idle 0 min: will be stopped in 1 min if a job is waiting`, then `... when a job is
waiting`), checked against the API; a busy session's row shows none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import ROOT_TOKEN
from test_dashboard_browser import js, wait_until

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.idle import IdleAction, IdlePolicy
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.idleconfig import idle_from_classes
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings
from nomad_gpu.service.config.usageconfig import UsageSettings

pytestmark = pytest.mark.e2e

SPEC: dict[str, Any] = {"name": "idle-ui", "nodes": [{"name": "a100-1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]}]}


@pytest.fixture(scope="module")
def idle_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRuntime]:
    dc = DevCluster(SPEC, speed=50.0, heartbeat_s=1.0)
    nomad_url = dc.start()
    policy = IdlePolicy(after_s=3.0, warn_after_s=1.0, action=IdleAction.STOP)
    scheduling = SchedulingSettings(tick_s=0.5, usage=UsageSettings(interval_s=0.2),
                                    idle={**idle_from_classes(None), WorkloadClass.INTERACTIVE: policy})
    db: Path = tmp_path_factory.mktemp("ui") / "queue.db"
    runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address=nomad_url), scheduling=scheduling,
                                             db_path=str(db), listen="http://127.0.0.1:0", token=ROOT_TOKEN))
    runtime.start(wait_ready_s=10)
    yield runtime
    runtime.stop()
    dc.stop()


def api(runtime: ServiceRuntime, path: str, method: str = "GET", body: str | None = None) -> Any:
    r = requests.request(method, f"{runtime.address}{path}", data=body.encode() if body else None, timeout=10,
                         headers={"Authorization": f"Bearer {ROOT_TOKEN}", "Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    return r.json()


def session(runtime: ServiceRuntime, name: str, util: int) -> str:
    text = (f"name: {name}\nteam: lab\nclass: interactive\ntask: {{image: busybox}}\n"
            f"resources: {{cpu: 500, memory: 512}}\ngpu: {{count: 1}}\ndev: {{duration_s: 100000, gpu_util: {util}}}\n")
    return str(api(runtime, "/v1/jobs", "POST", text)["entries"][0]["id"])


def note_in_row(driver: Any, entry: str) -> str:
    return str(js(driver, "const r = document.querySelector(`#queue-rows tr[data-entry='${arguments[0]}']`);"
                          "const n = r && r.querySelector('.idle-note'); return n ? n.textContent : ''", entry))


def test_an_idle_sessions_row_shows_its_clock(browser: Any, idle_stack: ServiceRuntime) -> None:
    runtime = idle_stack
    lazy, busy = session(runtime, "notebook", 0), session(runtime, "training-loop", 90)
    browser.get(f"{runtime.address}/ui/style.css")
    js(browser, "sessionStorage.setItem('nomad-gpu-token', arguments[0])", ROOT_TOKEN)
    browser.get(f"{runtime.address}/ui?poll_ms=250")
    shown = wait_until(lambda: "will be stopped in" in (t := note_in_row(browser, lazy)) and t, "the warning",
                       timeout_s=20)
    assert shown.startswith("idle 0 min: will be stopped in 1 min if a job is waiting"), shown
    due = wait_until(lambda: "when a job is waiting" in (t := note_in_row(browser, lazy)) and t, "the due clock",
                     timeout_s=20)
    assert due == "idle 0 min: will be stopped when a job is waiting"
    assert api(runtime, f"/v1/jobs/{lazy}")["usage"]["idle_note"] in (due, due.replace("0 min", "1 min"))
    assert note_in_row(browser, busy) == "" and api(runtime, f"/v1/jobs/{busy}")["usage"]["idle_note"] == ""
    assert api(runtime, f"/v1/jobs/{lazy}")["state"] == "running"  # nobody waits: only warned
