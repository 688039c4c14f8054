"""The cluster view on mixed-fleet, in headless Chromium: a MIG instance marked by its profile, a shared
GPU filled by milli-GPU, a draining node, and axe-core on all of them (fixtures: conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from test_dashboard_browser import open_dashboard, run_axe, wait_until

pytestmark = pytest.mark.e2e


def submit(runtime: Any, name: str, ask: str) -> str:
    text = (f"name: {name}\nteam: platform\ntask: {{image: busybox}}\nresources: {{cpu: 500, memory: 512}}\n"
            f"{ask}\ndev: {{duration_s: 100000}}\n")
    r = requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), timeout=10,
                      headers={"Authorization": f"Bearer {runtime.settings.token}", "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return str(r.json()["entries"][0]["id"])


def slices(driver: Any) -> list[dict[str, str]]:
    return list(driver.execute_script(
        "return Array.from(document.querySelectorAll('#nodes .slice')).map(s => ({device: s.dataset.device, "
        "state: s.dataset.state, entry: s.dataset.entry, text: s.textContent}))"))


def shared_cells(driver: Any) -> list[dict[str, str]]:
    return list(driver.execute_script(
        "return Array.from(document.querySelectorAll('#nodes .cell[data-device]')).filter(c => "
        "c.querySelector('.fill') || c.classList.contains('share')).map(c => ({device: c.dataset.device, "
        "state: c.dataset.state, entry: c.dataset.entry, text: c.querySelector('.what').textContent}))"))


def test_mig_shares_and_draining_in_the_cluster_view(browser: Any, fleet: Any) -> None:
    dc, runtime = fleet
    open_dashboard(browser, runtime)
    assert len(wait_until(lambda: slices(browser), "the MIG instances")) == 2 + 2 + 7
    mig = submit(runtime, "mig-job", "mig: {profile: 3g.40gb}")
    share = submit(runtime, "share-job", "share: {milli: 250}")
    (used,) = wait_until(lambda: [s for s in slices(browser) if mig in s["entry"].split()], "the MIG instance in use")
    assert used["state"] == "used" and used["text"].startswith("3g.40gb")
    (part,) = wait_until(lambda: [c for c in shared_cells(browser) if share in c["entry"].split()], "the shared GPU")
    assert part["state"] == "share" and part["text"] == "250m of 1000m"
    dc.node_drain("a100-2")
    drained = wait_until(lambda: browser.execute_script(
        "const t = Array.from(document.querySelectorAll('#nodes article.node')).find(n => "
        "n.querySelector('h3').textContent === 'a100-2'); return t && t.classList.contains('off') && "
        "Array.from(t.querySelectorAll('.cell')).map(c => c.dataset.state)"), "the drained node")
    assert drained == ["draining"] * 8
    assert run_axe(browser) == []
    dc.node_undrain("a100-2")
    wait_until(lambda: browser.execute_script(
        "return !Array.from(document.querySelectorAll('#nodes .cell')).some(c => c.dataset.state === 'draining')"),
        "the node back")
