"""The dashboard's everyday views in a real headless Chromium (fixtures: conftest.py), at 1280 x 800 and
390 x 844: an 8-GPU entry's devices folded to a count, names kept whole; a job's own view (state, reason,
placement, the HCL Nomad stored, the log's last lines, and hold / release / cancel that the dev cluster's
audit confirms); "ends in" from `runtime`; one word per state; the Sweeps panel from `GET /v1/sweeps`."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from test_dashboard_browser import headers, js, open_dashboard, row, run_axe, submit, wait_until

pytestmark = pytest.mark.e2e

NAME = "resnet50-training-run"


@pytest.fixture(scope="module")
def page(browser: Any, stack: Any) -> tuple[Any, Any, Any]:
    dc, runtime = stack
    open_dashboard(browser, runtime)
    return browser, dc, runtime


def spec(name: str, gpus: int, duration_s: float, extra: str = "") -> str:
    return (f"name: {name}\nteam: vision\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            f"gpu: {{count: {gpus}}}\ndev: {{duration_s: {duration_s}}}\n{extra}")


def entry(runtime: Any, entry_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{runtime.address}/v1/jobs/{entry_id}", headers=headers(runtime), timeout=10).json())


def lines_of(browser: Any, css: str) -> float:
    """How many text lines the element takes (its height over its line height)."""
    return float(js(browser, "const e = document.querySelector(arguments[0]); const s = getComputedStyle(e);"
                             "return e.getBoundingClientRect().height / parseFloat(s.lineHeight || 16);", css))


@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["1280x800", "390x844"])
def test_an_eight_gpu_row_stays_readable(page: tuple[Any, Any, Any], size: tuple[int, int]) -> None:
    browser, _, runtime = page
    if size == (1280, 800):
        page_entry = submit(runtime, spec(NAME, 8, 100_000, "runtime: 2h\n"))
        js(browser, "window.eightGpu = arguments[0]", page_entry)
    page_entry = js(browser, "return window.eightGpu")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": size[0] < 800})
    try:
        shown = wait_until(lambda: (r := row(browser, page_entry)) and r["state"] == "running" and r, "the running row")
        assert "8 devices" in shown["why"] and "GPU-" not in js(
            browser, "return document.querySelector(`#queue-rows tr[data-entry='${arguments[0]}'] .why`).innerText",
            page_entry), "the eight device IDs are folded behind a count"
        assert shown["eta"].startswith("ends in 1h5") or shown["eta"].startswith("ends in 2h"), shown["eta"]
        base = f"#queue-rows tr[data-entry='{page_entry}']"
        assert lines_of(browser, f"{base} button.open") < 1.5, "the job's name is not broken over lines"
        assert lines_of(browser, f"{base} .state") < 1.5
        js(browser, f"document.querySelector(\"{base} details.devs summary\").click()")
        ids = js(browser, f"return document.querySelector(\"{base} details.devs .devices\").innerText")
        assert ids.count("GPU-") == 8, "on demand, the device IDs"
        js(browser, f"document.querySelector(\"{base} details.devs summary\").click()")
        width = js(browser, "return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"horizontal scroll at {size}: {width}"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_one_word_for_a_queued_entry_and_a_badge_for_one_that_can_never_run(page: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = page
    waiting = submit(runtime, spec("behind-the-eight", 1, 60))  # the eight GPUs are taken
    shown = wait_until(lambda: row(browser, waiting), "the queued row")
    state_text = js(browser, "return document.querySelector(`#queue-rows tr[data-entry='${arguments[0]}'] .state`)"
                             ".textContent", waiting)
    assert shown["state"] == "queued" and state_text == "queued"
    assert js(browser, "return document.querySelector('#summary dt').textContent") == "Queued"
    requests.delete(f"{runtime.address}/v1/jobs/{waiting}", headers=headers(runtime), timeout=10).raise_for_status()
    never = submit(runtime, spec("nine", 9, 60, "allow_unschedulable: true\n"))  # 8 GPUs is the most here
    badge = wait_until(lambda: js(browser, "const b = document.querySelector("
                                           "`#queue-rows tr[data-entry='${arguments[0]}'] .badge`); return b && "
                                           "b.textContent", never), "the unschedulable badge")
    assert badge == "unschedulable" and "at most 8 on one node here" in (row(browser, never) or {})["why"]
    requests.delete(f"{runtime.address}/v1/jobs/{never}", headers=headers(runtime), timeout=10).raise_for_status()


def test_the_job_view_shows_the_job_and_acts_on_it(page: tuple[Any, Any, Any]) -> None:
    browser, dc, runtime = page
    eight = js(browser, "return window.eightGpu")
    held = submit(runtime, spec("to-hold", 1, 60))
    wait_until(lambda: row(browser, held), "the queued row")
    js(browser, "document.querySelector(`#queue-rows tr[data-entry='${arguments[0]}'] button.open`).click()", held)
    facts = wait_until(lambda: (t := js(browser, "return document.getElementById('job-facts').innerText")) and
                       held in t and t, "the job view")
    assert "queued" in facts and "Reason" in facts
    assert js(browser, "return document.getElementById('job-hcl').textContent") == "not sent to Nomad yet"
    wait_until(lambda: js(browser, "return !!document.querySelector('#job-actions button[data-action=hold]')"),
               "a hold button for a queued job")
    js(browser, "document.querySelector('#job-actions button[data-action=hold]').click()")
    wait_until(lambda: entry(runtime, held)["held"] is True, "the hold, through the API")
    wait_until(lambda: js(browser, "return !!document.querySelector('#job-actions button[data-action=release]')"),
               "a release button once held")
    js(browser, "document.querySelector('#job-actions button[data-action=release]').click()")
    wait_until(lambda: entry(runtime, held)["held"] is False, "the release")
    requests.delete(f"{runtime.address}/v1/jobs/{held}", headers=headers(runtime), timeout=10).raise_for_status()

    js(browser, "document.querySelector(`#queue-rows tr[data-entry='${arguments[0]}'] button.open`).click()", eight)
    nomad_job = entry(runtime, eight)["nomad_job_id"]
    hcl = wait_until(lambda: (h := js(browser, "return document.getElementById('job-hcl').textContent"))
                     and nomad_job in h and h, "the HCL Nomad stored")
    assert 'job "' in hcl and "set_contains_any" in hcl
    log = wait_until(lambda: (t := js(browser, "return document.getElementById('job-log').textContent"))
                     and "started on" in t and t, "the log's last lines")
    assert len(log.strip().splitlines()) <= 20
    facts = js(browser, "return document.getElementById('job-facts').innerText")
    assert "running" in facts and "Placement main[0]" in facts and "ends in" in facts
    assert run_axe(browser) == []  # the job view open: no serious accessibility violation
    wait_until(lambda: js(browser, "return !!document.querySelector('#job-actions button[data-action=cancel]')"),
               "a cancel button for a running job")
    js(browser, "document.querySelector('#job-actions button[data-action=cancel]').click()")
    wait_until(lambda: entry(runtime, eight)["state"] == "cancelled", "the cancel, through the API", timeout_s=20)

    def ended() -> bool:
        allocs = [a for a in dc.audit()["allocations"] if a["job_id"] == nomad_job]
        return bool(allocs) and all(a["finished_at"] is not None for a in allocs)

    wait_until(ended, "the dev cluster to end the cancelled job's allocation", timeout_s=20)
    js(browser, "document.getElementById('job-close').click()")
    assert js(browser, "return document.getElementById('job').hidden") is True


def test_the_sweeps_panel_lists_sweeps_this_tab_never_saw(page: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = page
    text = spec("quick", 1, 5) + "kind: sweep\nsweep: {parameters: {lr: [0.1, 0.01]}}\n"
    r = requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), headers=headers(runtime), timeout=10)
    sweep = r.json()["entries"][0]["sweep"]
    wait_until(lambda: all(entry(runtime, e["id"])["state"] == "complete" for e in r.json()["entries"]),
               "the sweep to end")
    open_dashboard(browser, runtime)  # a new tab: it never saw the sweep's trials in the queue
    script = ("const r = document.querySelector(`#sweep-rows tr[data-sweep='${arguments[0]}']`);"
              "return r && [r.dataset.done, r.querySelector('summary').textContent];")
    done, summary = wait_until(lambda: js(browser, script, sweep), "the finished sweep in the panel")
    assert done == "2" and summary.startswith("quick ") and sweep in summary
