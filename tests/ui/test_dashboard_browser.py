"""The dashboard in a real headless Chromium against the service and the dev cluster (fixtures: conftest.py).

Facts the page shows are checked against what the API and the dev cluster did: a waiting job and its
reason, a GPU cell that turns used when the dev cluster runs the job and free when it ends, a cancel
made through the API that the page shows without a reload, a refused token. axe-core (vendored under
vendor/) checks accessibility; a 390 x 844 viewport must not scroll sideways.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.e2e

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
POLL_MS = 250


def headers(runtime: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {runtime.settings.token}", "Content-Type": "application/yaml"}


def submit(runtime: Any, text: str) -> str:
    r = requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), headers=headers(runtime), timeout=10)
    assert r.status_code == 201, r.text
    return str(r.json()["entries"][0]["id"])


def job(name: str, *, duration_s: float, model: str | None = None, util: float | None = None) -> str:
    models = f", models: [{model}]" if model else ""
    gpu_util = f", gpu_util: {util}" if util is not None else ""
    return (f"name: {name}\nteam: vision\ntask: {{image: busybox}}\nresources: {{cpu: 1000, memory: 1024}}\n"
            f"gpu: {{count: 1{models}}}\ndev: {{duration_s: {duration_s}{gpu_util}}}\n")


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def cells(driver: Any) -> list[dict[str, str]]:
    return list(js(driver, "return Array.from(document.querySelectorAll('#nodes .cell[data-device]'))"
                           ".map(c => ({device: c.dataset.device, state: c.dataset.state, entry: c.dataset.entry}))"))


def row(driver: Any, entry: str) -> dict[str, str] | None:
    return js(driver, "const r = document.querySelector(`#queue-rows tr[data-entry='${arguments[0]}']`);"
                      "return r && {state: r.dataset.state, why: r.querySelector('.why').textContent, "
                      "eta: r.querySelector('.eta').textContent, text: r.textContent};", entry)


def severe_logs(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def open_dashboard(driver: Any, runtime: Any) -> None:
    """Sign in the way the page does (session storage of this origin), then load the dashboard."""
    driver.get(f"{runtime.address}/ui/style.css")
    js(driver, "sessionStorage.setItem('nomad-gpu-token', arguments[0])", runtime.settings.token)
    driver.get_log("browser")  # drained: a bare stylesheet tab asks for /favicon.ico, which is not the page's
    driver.get(f"{runtime.address}/ui?poll_ms={POLL_MS}")
    wait_until(lambda: js(driver, "return document.body.dataset.loaded") == "true", "the dashboard's first refresh")
    js(driver, "window.sameDocument = true")


def same_document(driver: Any) -> bool:
    return bool(js(driver, "return window.sameDocument === true"))


@pytest.fixture(scope="module")
def page(browser: Any, stack: Any) -> tuple[Any, Any, Any]:
    """The signed-in dashboard tab, the dev cluster and the service."""
    dc, runtime = stack
    open_dashboard(browser, runtime)
    return browser, dc, runtime


def test_the_page_loads_with_no_console_errors(page: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = page
    gpus = wait_until(lambda: cells(browser), "the GPU cells")
    assert len(gpus) == 8 and {c["state"] for c in gpus} == {"free"}
    assert js(browser, "return document.querySelectorAll('#nodes article.node').length") == 1
    time.sleep(4 * POLL_MS / 1000)  # a few refreshes: none may log an error either
    assert severe_logs(browser) == []


def test_the_queue_shows_a_waiting_job_with_its_reason(page: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = page
    # no node has the model: queued only with the opt-in, and its reason says it can never run here
    entry = submit(runtime, job("needs-h100", duration_s=60, model="NVIDIA H100-SXM5-80GB")
                   + "allow_unschedulable: true\n")
    shown = wait_until(lambda: (r := row(browser, entry)) and "unschedulable: " in r["why"] and r, "the reason")
    assert shown["state"] == "queued" and shown["eta"] == "unknown" and "needs-h100" in shown["text"]
    assert same_document(browser)


def test_a_gpu_cell_turns_used_while_its_job_runs_and_free_after(page: tuple[Any, Any, Any]) -> None:
    browser, dc, runtime = page
    entry = submit(runtime, job("short", duration_s=100))  # 2 s of wall time at speed 50
    used = wait_until(lambda: [c for c in cells(browser) if c["state"] == "used" and entry in c["entry"].split()],
                      "the job's cell to turn used")
    (cell,) = used
    running = [a for a in dc.audit()["allocations"] if entry in a["job_id"] and a["device_ids"]]
    assert running and running[0]["device_ids"] == [cell["device"]], "the page shows the device Nomad gave the job"
    assert "on gpu-a800-1" in wait_until(lambda: row(browser, entry), "the running row")["why"]
    wait_until(lambda: all(c["state"] == "free" for c in cells(browser) if c["device"] == cell["device"])
               and row(browser, entry) is None, "the cell to be free again", timeout_s=20)
    assert same_document(browser)


def test_a_cancel_made_through_the_api_shows_without_a_reload(page: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = page
    entry = submit(runtime, job("long", duration_s=100_000, util=73))
    wait_until(lambda: any(entry in c["entry"].split() for c in cells(browser)), "the long job on a GPU")
    # the device plugin's figures, read from Nomad's allocation stats by the service
    wait_until(lambda: "GPU 73 %" in (row(browser, entry) or {}).get("why", ""), "the job's GPU utilisation")
    r = requests.delete(f"{runtime.address}/v1/jobs/{entry}", headers=headers(runtime), timeout=10)
    assert r.status_code == 200, r.text
    wait_until(lambda: row(browser, entry) is None and not any(entry in c["entry"].split() for c in cells(browser)),
               "the cancelled job to leave the queue and its GPU", timeout_s=20)
    assert same_document(browser)


def test_a_serving_jobs_address_shows_in_its_row_and_its_detail(page: tuple[Any, Any, Any]) -> None:
    from selenium.webdriver.common.by import By

    browser, dc, runtime = page
    entry = submit(runtime, job("chat", duration_s=100_000) + "template: service\n"
                   "ports: {http: {to: 8000}}\nservice: {name: chat, port: http, check: {type: http, path: /health}}\n")
    (registration,) = wait_until(lambda: requests.get(f"{dc.url}/v1/service/chat", timeout=5).json(),
                                 "Nomad's registration of the service")
    address = f"{registration['Address']}:{registration['Port']}"
    wait_until(lambda: f"http {address}" in (row(browser, entry) or {}).get("why", ""), "the address in the row")
    browser.find_element(By.CSS_SELECTOR, f"#queue-rows tr[data-entry='{entry}'] button.open").click()
    script = ("const a = document.querySelector(\"#job-facts .address[data-port='http'] a\");"
              "return a && {text: a.textContent, href: a.href};")
    shown = wait_until(lambda: js(browser, script), "the address in the detail")
    assert shown == {"text": address, "href": f"http://{address}/"}
    browser.find_element(By.ID, "job-close").click()
    requests.delete(f"{runtime.address}/v1/jobs/{entry}", headers=headers(runtime), timeout=10).raise_for_status()
    wait_until(lambda: row(browser, entry) is None, "the cancelled job to leave the queue", timeout_s=20)
    assert same_document(browser)


def test_a_cell_names_its_entry_and_device_from_the_keyboard_and_rows_link_to_nomad(
        page: tuple[Any, Any, Any]) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    browser, dc, runtime = page
    entry = submit(runtime, job("inspect-me", duration_s=100_000))
    (cell,) = wait_until(lambda: [c for c in cells(browser) if entry in c["entry"].split()], "the job's cell")
    css = f"#nodes button[data-device='{cell['device']}']"
    for _ in range(5):  # a redraw may land between finding the button and pressing it
        try:
            browser.find_element(By.CSS_SELECTOR, css).send_keys(Keys.ENTER)  # a button: keyboard reachable
            break
        except StaleElementReferenceException:
            continue
    # read in one script each: a redraw between finding an element and reading it would leave it stale
    detail = js(browser, "return document.getElementById('cell-detail').innerText")
    assert entry in detail and cell["device"] in detail and "vision" in detail
    assert js(browser, "return document.querySelector(arguments[0]).getAttribute('aria-pressed')", css) == "true"
    submit(runtime, job("redraw", duration_s=100_000))  # the cluster view changes and is drawn again...
    wait_until(lambda: len([c for c in cells(browser) if c["state"] == "used"]) >= 2, "a second used cell")
    assert js(browser, "return document.activeElement.dataset.device") == cell["device"]  # ...focus stays put
    job_id = requests.get(f"{runtime.address}/v1/jobs/{entry}", headers=headers(runtime), timeout=10).json()
    browser.find_element(By.CSS_SELECTOR, f"#queue-rows tr[data-entry='{entry}'] button.open").click()
    link = wait_until(lambda: js(browser, "const a = document.querySelector('#job-facts a'); return a && a.href"),
                      "the job view's link to Nomad's UI")
    assert link == f"{dc.url}/ui/jobs/{job_id['nomad_job_id']}@default"
    browser.find_element(By.ID, "job-close").click()
    state = Select(browser.find_element(By.ID, "f-state"))
    state.select_by_value("queued")
    assert row(browser, entry) is None
    state.select_by_value("live")
    assert row(browser, entry) is not None
    Select(browser.find_element(By.ID, "f-team")).select_by_value("vision")
    assert row(browser, entry) is not None
    state.select_by_value("")
    Select(browser.find_element(By.ID, "f-team")).select_by_value("")
    requests.delete(f"{runtime.address}/v1/jobs/{entry}", headers=headers(runtime), timeout=10).raise_for_status()
    wait_until(lambda: row(browser, entry) is None, "the cancelled job to leave the queue", timeout_s=20)


def test_a_sweeps_progress_and_its_trials(page: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = page
    text = (job("grid", duration_s=50) + "kind: sweep\n"
            "sweep: {mode: grid, parameters: {lr: [0.1, 0.01], batch: [32, 64]}, max_parallel: 2}\n")
    r = requests.post(f"{runtime.address}/v1/jobs", data=text.encode(), headers=headers(runtime), timeout=10)
    assert r.status_code == 201, r.text
    sweep = r.json()["entries"][0]["sweep"]
    script = ("const r = document.querySelector(`#sweep-rows tr[data-sweep='${arguments[0]}']`);"
              "return r && r.dataset.done === '4' && [r.querySelector('progress').value, "
              "r.querySelector('progress').max];")
    progress = wait_until(lambda: js(browser, script, sweep), "the sweep's four trials done", timeout_s=15)
    assert progress == [4, 4]
    js(browser, "document.querySelector(`#sweep-rows tr[data-sweep='${arguments[0]}'] summary`).click()", sweep)
    trials = wait_until(lambda: js(browser, "return Array.from(document.querySelectorAll("
                                            "`#sweep-rows tr[data-sweep='${arguments[0]}'] .trials li`))"
                                            ".map(li => li.textContent)", sweep) != ["…"] and
                        js(browser, "return document.querySelectorAll("
                                    "`#sweep-rows tr[data-sweep='${arguments[0]}'] .trials li`).length", sweep),
                        "the trials, read when the sweep is opened")
    assert trials == 4


def run_axe(driver: Any) -> list[dict[str, Any]]:
    js(driver, AXE.read_text(encoding="utf-8"))
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations), e => done(String(e)));")
    assert isinstance(result, list), result
    return [{"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:3]}
            for v in result if v["impact"] in ("serious", "critical")]


def test_no_serious_accessibility_violation_at_desktop_and_phone_sizes(page: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = page
    submit(runtime, job("running-for-axe", duration_s=100_000))
    wait_until(lambda: any(c["state"] == "used" for c in cells(browser)), "a used cell")
    assert run_axe(browser) == []
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    try:
        time.sleep(2 * POLL_MS / 1000)
        width = js(browser, "return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[1] == 390 and width[0] <= width[1], f"horizontal scroll at 390 px: {width}"
        assert run_axe(browser) == []
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_a_wrong_token_is_refused_and_the_right_one_signs_in(page: tuple[Any, Any, Any]) -> None:
    from selenium.webdriver.common.by import By

    browser, _, runtime = page
    field = browser.find_element(By.ID, "token")
    field.send_keys("wrong-token-0123456789abcdef")
    field.submit()
    wait_until(lambda: js(browser, "return document.body.dataset.loaded") == "refused", "the refusal")
    alert = browser.find_element(By.ID, "alert")
    assert alert.is_displayed() and "refused" in alert.text
    assert cells(browser) == [] and js(browser, "return document.querySelectorAll('#queue-rows tr').length") == 0
    assert js(browser, "return sessionStorage.getItem('nomad-gpu-token')") is None
    field = browser.find_element(By.ID, "token")
    field.send_keys(runtime.settings.token)
    field.submit()
    wait_until(lambda: js(browser, "return document.body.dataset.loaded") == "true" and cells(browser), "sign-in")
    assert not browser.find_element(By.ID, "alert").is_displayed()
    assert js(browser, "return sessionStorage.getItem('nomad-gpu-token')") == runtime.settings.token
