"""The dashboard's Teams view says what a team of a cohort borrows or lends (issue 34), in a real browser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from conftest import ROOT_TOKEN
from test_dashboard_browser import js, open_dashboard, wait_until

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.fairshare import FairShareConfig
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings
from nomad_gpu.service.config.teamconfig import teams_from_mapping

pytestmark = pytest.mark.e2e

FOUR: dict[str, Any] = {"name": "four", "nodes": [
    {"name": "n1", "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 4, "memory_mib": 81920}]}]}
TEAMS = {"vision": {"quota_gpu": 2, "cohort": "research"},
         "nlp": {"quota_gpu": 2, "borrow_gpu": 2, "cohort": "research"}}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRuntime]:
    with DevCluster(FOUR, speed=50.0, heartbeat_s=1.0) as dc:
        scheduling = SchedulingSettings(tick_s=0.5, fair=FairShareConfig(teams=teams_from_mapping(TEAMS)))
        runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address=dc.url), scheduling=scheduling,
                                                 db_path=str(tmp_path_factory.mktemp("ui") / "queue.db"),
                                                 listen="http://127.0.0.1:0", token=ROOT_TOKEN))
        runtime.start(wait_ready_s=10)
        yield runtime
        runtime.stop()


def test_the_teams_view_says_who_borrows_and_who_lends(browser: Any, cohort: ServiceRuntime) -> None:
    for k in range(3):
        text = (f"name: n{k}\nteam: nlp\nclass: exploratory\ntask: {{image: busybox}}\n"
                "resources: {cpu: 1000, memory: 1024}\ngpu: {count: 1}\ndev: {duration_s: 3600}\n")
        r = requests.post(f"{cohort.address}/v1/jobs", data=text.encode(), timeout=10,
                          headers={"Authorization": f"Bearer {ROOT_TOKEN}", "Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
    open_dashboard(browser, cohort)
    rows = wait_until(lambda: (got := js(browser, "return [...document.querySelectorAll('#team-rows tr')]"
                                                  ".map((r) => r.textContent)")) and len(got) == 2
                      and any("borrows" in t for t in got) and got, "the teams rows")
    nlp = next(t for t in rows if t.startswith("nlp"))
    vision = next(t for t in rows if t.startswith("vision"))
    assert "2 GPU · borrows 1 from research" in nlp, nlp
    assert "2 GPU · lends 1 to research" in vision, vision
