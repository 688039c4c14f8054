"""The dashboard's queue says why each entry waits and where it stands (issue 40, item 1), at 1280 x 800 and
390 x 844, in a real headless Chromium (fixtures: conftest.py): sweep trials beyond `max_parallel` name the
limit, an `after:` entry its dependency, a held one its hold; each queued entry's place in the scheduler's
order is its Pos cell (a dash where the scheduler does not consider it); an ETA resting on the operator's
defaults says "estimate" and from what."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from test_dashboard_browser import headers, js, open_dashboard, submit, wait_until

pytestmark = pytest.mark.e2e


def spec(name: str, gpus: int, duration_s: float, extra: str = "") -> str:
    return (f"name: {name}\nteam: vision\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            f"gpu: {{count: {gpus}}}\ndev: {{duration_s: {duration_s}}}\n{extra}")


def cells(browser: Any, entry: str) -> dict[str, str] | None:
    return js(browser, "const r = document.querySelector(`#queue-rows tr[data-entry='${arguments[0]}']`);"
                       "return r && {state: r.dataset.state, why: r.querySelector('.why').textContent, "
                       "pos: r.querySelector('.pos').textContent, eta: r.querySelector('.eta').textContent};", entry)


@pytest.fixture(scope="module")
def queue(browser: Any, stack: Any) -> dict[str, Any]:
    """Eight GPUs taken for a long while, then a throttled sweep, a held entry and one waiting on `after:`."""
    _, runtime = stack
    blocker = submit(runtime, spec("blocker", 8, 100_000))
    r = requests.post(f"{runtime.address}/v1/jobs", headers=headers(runtime), timeout=10,
                      data=(spec("lr-hpo", 1, 60) + "kind: sweep\nsweep: {parameters: {lr: [1, 2, 3, 4, 5, 6]}, "
                                                    "max_parallel: 2}\n").encode())
    assert r.status_code == 201, r.text
    trials = [e["id"] for e in r.json()["entries"]]
    held = submit(runtime, spec("held", 1, 60))
    requests.post(f"{runtime.address}/v1/jobs/{held}/hold", headers=headers(runtime), timeout=10).raise_for_status()
    after = submit(runtime, spec("evaluate", 1, 60, f"after: [{blocker}]\n"))
    open_dashboard(browser, runtime)
    return {"browser": browser, "trials": trials, "held": held, "after": after, "blocker": blocker,
            "sweep": r.json()["entries"][0]["sweep"]}


@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["1280x800", "390x844"])
def test_every_waiting_row_says_why_and_where_it_stands(queue: dict[str, Any], size: tuple[int, int]) -> None:
    browser = queue["browser"]
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": size[0] < 800})
    try:
        first, second, *rest = queue["trials"]
        wait_until(lambda: (c := cells(browser, first)) and c["pos"] == "1", "the first trial at position 1")
        assert (cells(browser, second) or {})["pos"] == "2"
        for trial in rest:
            shown = cells(browser, trial) or {}
            assert shown["pos"] == "–" and f"sweep {queue['sweep']} at max_parallel 2" in shown["why"], shown
        held = cells(browser, queue["held"]) or {}
        assert held["why"] == "held by user" and held["pos"] == "–" and held["eta"] == "held"
        after = cells(browser, queue["after"]) or {}
        assert after["why"].startswith(f"after: waiting for {queue['blocker']}") and after["pos"] == "–"
        eta = (cells(browser, first) or {})["eta"]
        assert eta.startswith("~in ") and "(estimate from template batch default)" in eta, eta
        assert "waiting for the next cycle" not in js(browser, "return document.getElementById('queue').innerText")
        width = js(browser, "return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"horizontal scroll at {size}: {width}"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
