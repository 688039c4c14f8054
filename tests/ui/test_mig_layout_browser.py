"""The cluster view draws each MIG GPU by placement, one tile per physical GPU, in headless Chromium.

An opted-in node with the project's plugin (two H100s, each 3g.40gb@0 + 1g.10gb@4, @5, @6) and a node
with the stock plugin (no placements). Two 3g jobs and a 1g job run, a third 3g job waits, and the service
re-lays the GPU whose 1g instances are idle; the dev cluster's fingerprint takes long, so the re-layout
stays in progress and the page names it on that GPU's tile. The stock node's tile says its layout is not
known. axe-core finds nothing serious."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from conftest import ROOT_TOKEN
from test_dashboard_browser import open_dashboard, run_axe, wait_until

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings
from nomad_gpu.service.relayout.config import MigRelayoutConfig
from nomad_gpu.service.relayout.controller import RelayoutSettings

pytestmark = pytest.mark.e2e

H100 = "NVIDIA H100 80GB HBM3"
LAYOUT = ["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
SPEC: dict[str, Any] = {"name": "mig-layout-ui", "nodes": [
    {"name": "h100-mig-1", "device_plugin": "nomad-gpu", "meta": {"nomad_gpu_mig_relayout": "true"},
     "mig_fingerprint_delay_s": 1e6, "cpu_shares": 64000, "memory_mb": 262144,
     "gpus": [{"model": H100, "count": 2, "memory_mib": 81920, "mig": LAYOUT}]},
    {"name": "h100-stock", "cpu_shares": 64000, "memory_mb": 262144,
     "gpus": [{"model": H100, "count": 1, "memory_mib": 81920, "mig": ["7g.80gb"]}]}]}


@pytest.fixture(scope="module")
def mig_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, ServiceRuntime]]:
    dc = DevCluster(SPEC, speed=50.0, heartbeat_s=1.0)
    nomad_url = dc.start()
    config = MigRelayoutConfig(enabled=True, interval_s=0.05,
                               controller=RelayoutSettings(fingerprint_timeout_s=3600.0, job_timeout_s=60.0))
    scheduling = SchedulingSettings(tick_s=0.5, mig_relayout=config)
    runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address=nomad_url), scheduling=scheduling,
                                             db_path=str(tmp_path_factory.mktemp("ui") / "queue.db"),
                                             listen="http://127.0.0.1:0", token=ROOT_TOKEN))
    runtime.start(wait_ready_s=10)
    assert runtime.scheduler.ready.is_set(), "the service never reconciled with the dev cluster"
    yield dc, runtime
    runtime.stop()
    dc.stop()


def submit(runtime: ServiceRuntime, name: str, profile: str) -> str:
    text = (f"name: {name}\nteam: platform\ntask: {{image: busybox}}\nresources: {{cpu: 500, memory: 512}}\n"
            f"mig: {{profile: {profile}}}\ndev: {{duration_s: 100000}}\n")
    r = requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), timeout=10,
                      headers={"Authorization": f"Bearer {ROOT_TOKEN}", "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return str(r.json()["entries"][0]["id"])


def tiles(driver: Any) -> list[dict[str, Any]]:
    """Each MIG tile: its node, GPU, label, its instances (first slice, span, state, text), its uncovered
    slices, and what it says of a re-layout or an unknown layout."""
    return list(driver.execute_script("""
      return Array.from(document.querySelectorAll('#nodes .cell.mig')).map(c => ({
        node: c.closest('article').querySelector('h3').textContent, gpu: c.dataset.gpu || null,
        idx: c.querySelector('.idx').textContent,
        placed: Array.from(c.querySelectorAll('.layout > li:not(.uncovered)')).map(li => ({
          start: Number(li.dataset.start), span: getComputedStyle(li).gridColumnEnd,
          col: getComputedStyle(li).gridColumnStart, state: li.querySelector('.slice').dataset.state,
          text: li.querySelector('.slice').firstChild.textContent,
          width: li.getBoundingClientRect().width})),
        uncovered: Array.from(c.querySelectorAll('.layout > li.uncovered')).map(li => Number(li.dataset.start)),
        relayout: (c.querySelector('.relayout') || {}).textContent || null,
        note: (c.querySelector('.layout-note') || {}).textContent || null}));""" ))


def test_each_mig_gpu_by_placement_with_the_relayout_in_progress(browser: Any, mig_stack: Any) -> None:
    dc, runtime = mig_stack
    open_dashboard(browser, runtime)
    drawn = wait_until(lambda: [t for t in tiles(browser) if t["gpu"]], "the placed MIG GPUs")
    assert len(drawn) == 2 and all(t["node"] == "h100-mig-1" for t in drawn)
    for t in drawn:  # one tile per physical GPU, its instances at their slices, slice 7 uncovered
        assert [(p["start"], p["col"], p["span"], p["text"]) for p in t["placed"]] == [
            (0, "1", "span 4", "3g.40gb"), (4, "5", "span 1", "1g.10gb"), (5, "6", "span 1", "1g.10gb"),
            (6, "7", "span 1", "1g.10gb")]
        assert t["uncovered"] == [7] and t["relayout"] is None
        three, one = t["placed"][0]["width"], t["placed"][1]["width"]
        assert three > 3 * one  # drawn by placement: four slices wide against one
    (stock,) = [t for t in tiles(browser) if t["node"] == "h100-stock"]
    assert stock["gpu"] is None
    assert stock["note"] == "layout not known: the node's device plugin publishes no placements"

    for name, profile in (("serve-a", "3g.40gb"), ("serve-b", "3g.40gb"), ("small", "1g.10gb")):
        submit(runtime, name, profile)
    used = wait_until(lambda: (n := sum(p["state"] == "used" for t in tiles(browser) if t["gpu"] for p in t["placed"]))
                      == 3 and n, "the three jobs on their instances")
    assert used == 3
    submit(runtime, "waiting-3g", "3g.40gb")
    (tile,) = wait_until(lambda: [t for t in tiles(browser) if t["relayout"] == "re-layout in progress: 3g.40gb@4 "
                                  "(fingerprint)"], "the re-layout on its tile", 45.0)
    # the GPU re-laid is the one whose 1g instances were idle: they are marked as being re-laid (withheld
    # from the queue meanwhile); the other GPU's tile names no re-layout
    assert [p["state"] for p in tile["placed"]] == ["used", "relaying", "relaying", "relaying"]
    assert [p["text"] for p in tile["placed"]] == ["3g.40gb ✓", "1g.10gb ↻", "1g.10gb ↻", "1g.10gb ↻"]
    (other,) = [t for t in tiles(browser) if t["gpu"] and t["gpu"] != tile["gpu"]]
    assert other["relayout"] is None and sum(p["state"] == "used" for p in other["placed"]) == 2
    with dc.state.lock:
        (node,) = [n for n in dc.state.nodes.values() if n.name == "h100-mig-1"]
        uuids = {g.uuid for g in node.mig_gpus}
    assert tile["gpu"] in uuids and tile["idx"].startswith(f"H100 80GB HBM3 {tile['gpu'][:12]}")
    assert run_axe(browser) == []
