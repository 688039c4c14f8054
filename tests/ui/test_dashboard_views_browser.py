"""The dashboard a person wants to look at, in headless Chromium at 1280 x 800 and 390 x 844 (issue 40, item 3).

A dev cluster with two whole A100s (stock plugin) and one H100 with two MIG 3g.40gb instances per physical
GPU (stock plugin: no placements, but the instances of one GPU share its PCI bus ID). The page shows whose
token it is; GPU cells name the job that holds them; each node its GPU utilisation; each physical MIG GPU
its compute slices; the queue in the scheduler's order, 20 entries a page (`sort=position`, limit/offset);
a phone card only as tall as its lines; GPU-hours per team and class from `GET /v1/usage`; a sweep cancelled
in one action after a confirm step. Every fact is checked against the API or the dev cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from conftest import ROOT_TOKEN
from test_dashboard_browser import js, run_axe, wait_until

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings, ServiceSettings
from nomad_gpu.service.config.usageconfig import UsageSettings

pytestmark = pytest.mark.e2e

VISION_TOKEN = "dashboard-vision-0123456789abcdef"
A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
SPEC: dict[str, Any] = {"name": "dashboard-views", "nodes": [
    {"name": "a100-1", "cpu_shares": 64000, "memory_mb": 262144,
     "gpus": [{"model": A100, "count": 2, "memory_mib": 81920}]},
    {"name": "h100-mig", "cpu_shares": 64000, "memory_mb": 262144,
     "gpus": [{"model": H100, "count": 2, "memory_mib": 81920, "mig": ["3g.40gb", "3g.40gb"]}]}]}
SIZES = [(1280, 800), (390, 844)]
IDS = ["1280x800", "390x844"]
POLL_MS = 250


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, ServiceRuntime]]:
    dc = DevCluster(SPEC, speed=50.0, heartbeat_s=1.0)
    nomad_url = dc.start()
    scheduling = SchedulingSettings(tick_s=0.5, usage=UsageSettings(interval_s=0.5))
    runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address=nomad_url), scheduling=scheduling,
                                             db_path=str(tmp_path_factory.mktemp("ui") / "queue.db"),
                                             listen="http://127.0.0.1:0", token=ROOT_TOKEN,
                                             access=AccessSettings(tokens={VISION_TOKEN: "vision"})))
    runtime.start(wait_ready_s=10)
    assert runtime.scheduler.ready.is_set(), "the service never reconciled with the dev cluster"
    yield dc, runtime
    runtime.stop()
    dc.stop()


def api(runtime: Any, path: str, method: str = "GET", body: str | None = None, token: str = ROOT_TOKEN) -> Any:
    r = requests.request(method, f"{runtime.address}{path}", data=body.encode() if body else None, timeout=10,
                         headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    return r.json()


def submit(runtime: Any, name: str, ask: str, *, priority: int = 50, util: int | None = None,
           extra: str = "") -> list[str]:
    dev = f"{{duration_s: 100000{f', gpu_util: {util}' if util is not None else ''}}}"
    text = (f"name: {name}\nteam: vision\npriority: {priority}\ntask: {{image: busybox}}\n"
            f"resources: {{cpu: 500, memory: 512}}\n{ask}\ndev: {dev}\n{extra}")
    return [e["id"] for e in api(runtime, "/v1/jobs", "POST", text)["entries"]]


def open_as(driver: Any, runtime: Any, token: str) -> None:
    driver.get(f"{runtime.address}/ui/style.css")
    js(driver, "sessionStorage.setItem('nomad-gpu-token', arguments[0])", token)
    driver.get(f"{runtime.address}/ui?poll_ms={POLL_MS}")
    wait_until(lambda: js(driver, "return document.body.dataset.loaded") == "true", "the dashboard's first refresh")


class Sized:
    """The tab at one size for the length of a test."""

    def __init__(self, driver: Any, size: tuple[int, int]) -> None:
        self.driver, self.size = driver, size

    def __enter__(self) -> Any:
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": self.size[0], "height": self.size[1], "deviceScaleFactor": 1, "mobile": self.size[0] < 800})
        return self.driver

    def __exit__(self, *exc: object) -> None:
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def no_sideways_scroll(driver: Any) -> None:
    width = js(driver, "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"horizontal scroll: {width}"


def visible_in_viewport(driver: Any, css: str) -> bool:
    return bool(js(driver, "const e = document.querySelector(arguments[0]); if (!e) return false;"
                           "const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && r.left >= 0 "
                           "&& r.right <= window.innerWidth;", css))


@pytest.fixture(scope="module")
def tab(browser: Any, views: Any) -> tuple[Any, Any, Any]:
    dc, runtime = views
    open_as(browser, runtime, ROOT_TOKEN)
    return browser, dc, runtime


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_the_header_says_whose_token_it_is(tab: tuple[Any, Any, Any], size: tuple[int, int]) -> None:
    browser, _, runtime = tab
    with Sized(browser, size):
        open_as(browser, runtime, VISION_TOKEN)
        who = wait_until(lambda: js(browser, "const w = document.getElementById('who');"
                                             "return w && !w.hidden && [w.textContent, w.dataset.team]"), "the team")
        assert who == ["team vision", "vision"] == ["team " + api(runtime, "/v1/whoami", token=VISION_TOKEN)["team"],
                                                    "vision"]
        assert visible_in_viewport(browser, "#who")
        open_as(browser, runtime, ROOT_TOKEN)
        assert wait_until(lambda: js(browser, "return document.getElementById('who').textContent"),
                          "the admin's header") == "admin: every team"
        no_sideways_scroll(browser)


def test_cells_name_their_jobs_nodes_show_utilisation_and_mig_gpus_their_slices(tab: tuple[Any, Any, Any]
                                                                                 ) -> None:
    browser, _, runtime = tab
    (train,) = submit(runtime, "resnet-train", f"gpu: {{count: 1, models: [{A100}]}}", util=64)
    (serve,) = submit(runtime, "llm-serve", "mig: {profile: 3g.40gb}")
    for size in SIZES:
        with Sized(browser, size):
            cell = wait_until(lambda: js(browser, "return Array.from(document.querySelectorAll('#nodes .cell'))"
                                                  ".filter(c => (c.dataset.entry || '').split(' ').includes("
                                                  "arguments[0])).map(c => c.querySelector('.what').textContent)",
                                         train), "the job's GPU cell")
            assert cell == ["resnet-train"], "the cell names the job, not only its ID"
            # the node's utilisation: what its busy device reports (the dev cluster's gpu_util), as the API says
            util = wait_until(lambda: js(browser, "const t = document.querySelector(\"article[data-node] .util"
                                                  "[data-util='64']\"); return t && t.textContent"), "a100-1's util")
            assert "GPU utilisation 64 %" in util and "mean of 1 busy device" in util
            (node,) = [n for n in api(runtime, "/v1/inventory")["nodes"] if n["name"] == "a100-1"]
            assert (node["gpu_util_pct"], node["gpu_util_devices"]) == (64.0, 1)
            # each physical MIG GPU its own tile: 7 compute slices, two 3g instances and one slice unpartitioned
            tiles = wait_until(lambda: (t := js(browser, """
              return Array.from(document.querySelectorAll('#nodes .cell.mig[data-bus]')).map(c => ({
                bus: c.dataset.bus, spans: Array.from(c.querySelectorAll('.layout > li:not(.uncovered)'))
                  .map(li => getComputedStyle(li).gridColumnEnd),
                uncovered: c.querySelectorAll('.layout > li.uncovered').length,
                inuse: (c.querySelector('.inuse') || {}).textContent || ''}))""")) and
                               any("llm-serve" in x["inuse"] for x in t) and t,
                               "the MIG GPUs by PCI bus")
            inventory = {g["pci_bus_id"] for n in api(runtime, "/v1/inventory")["nodes"] for g in n["mig_gpus"]}
            assert sorted(t["bus"] for t in tiles) == sorted(inventory) and len(tiles) == 2
            assert all(t["spans"] == ["span 3", "span 3"] and t["uncovered"] == 1 for t in tiles)
            assert sorted(t["inuse"] for t in tiles) == ["", "in use: 3g.40gb llm-serve"]
            no_sideways_scroll(browser)
    for entry in (train, serve):
        api(runtime, f"/v1/jobs/{entry}", "DELETE")
    wait_until(lambda: all(not g["holders"] for n in api(runtime, "/v1/inventory")["nodes"] for g in n["gpus"]),
               "the A100s free again", timeout_s=20)


def rows(driver: Any) -> list[dict[str, Any]]:
    return list(js(driver, "return Array.from(document.querySelectorAll('#queue-rows tr')).map(r => ({"
                           "id: r.dataset.entry, state: r.dataset.state, pos: r.querySelector('.pos').textContent}))"))


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_the_queue_in_the_schedulers_order_a_page_at_a_time(tab: tuple[Any, Any, Any], size: tuple[int, int]
                                                            ) -> None:
    browser, _, runtime = tab
    if size == SIZES[0]:  # both A100s taken, then 23 one-GPU jobs of mixed priorities wait for them
        (hog,) = submit(runtime, "hog", f"gpu: {{count: 2, models: [{A100}]}}")
        wait_until(lambda: api(runtime, f"/v1/jobs/{hog}")["state"] == "running", "the two-GPU job running")
        for i in range(23):
            submit(runtime, f"wait-{i:02d}", f"gpu: {{count: 1, models: [{A100}]}}", priority=10 + (i * 37) % 80)
    listed = wait_until(lambda: (e := api(runtime, "/v1/jobs?state=queued,admitted,running&sort=position")["entries"])
                        and sum(x["position"] is not None for x in e) == 23 and e, "23 positions from a cycle")
    with Sized(browser, size):
        js(browser, "document.getElementById('queue-prev').click()")
        first = wait_until(lambda: (r := rows(browser)) and [x["id"] for x in r] == [e["id"] for e in listed[:20]]
                           and r, "the first page in the scheduler's order")
        assert [x["pos"] for x in first] == [str(p) for p in range(1, 21)]
        assert js(browser, "return document.getElementById('queue-next').disabled") is False
        assert "Entries 1–20" in js(browser, "return document.getElementById('queue-count').textContent")
        js(browser, "document.getElementById('queue-next').click()")
        second = wait_until(lambda: (r := rows(browser)) and r[0]["id"] == listed[20]["id"] and r, "the second page")
        assert [x["id"] for x in second] == [e["id"] for e in listed[20:]]
        assert [x["pos"] for x in second[:3]] == ["21", "22", "23"] and second[-1]["state"] in ("admitted", "running")
        assert js(browser, "return document.getElementById('queue-next').disabled") is True
        assert "Entries 21–24" in js(browser, "return document.getElementById('queue-count').textContent")
        no_sideways_scroll(browser)
        js(browser, "document.getElementById('queue-prev').click()")
        wait_until(lambda: (r := rows(browser)) and r[0]["pos"] == "1", "the first page again")


def test_a_phone_card_is_as_tall_as_its_lines(tab: tuple[Any, Any, Any]) -> None:
    browser, _, runtime = tab
    with Sized(browser, (390, 844)):
        js(browser, "document.getElementById('queue-next').click()")  # the running 'hog' is on the second page
        wait_until(lambda: any(r["state"] in ("admitted", "running") for r in rows(browser)), "the running row")
        for state in ("queued", "running"):
            card = js(browser, """
              const r = document.querySelector(`#queue-rows tr[data-state='${arguments[0]}']`);
              const box = r.getBoundingClientRect(), s = getComputedStyle(r);
              const cells = Array.from(r.children).filter(td => getComputedStyle(td).display !== 'none');
              const frame = ['paddingTop', 'paddingBottom', 'borderTopWidth', 'borderBottomWidth']
                .reduce((a, k) => a + parseFloat(s[k]), 0);
              return {height: box.height, frame: frame, lines: cells.map(td => ({label: td.dataset.label,
                text: td.textContent.trim(), height: td.getBoundingClientRect().height,
                inner: td.getBoundingClientRect().height - parseFloat(getComputedStyle(td).paddingTop)
                  - parseFloat(getComputedStyle(td).paddingBottom),
                line: parseFloat(getComputedStyle(td).lineHeight)}))};""", state)
            empty = [c["label"] for c in card["lines"] if not c["text"]]
            assert empty == [], f"a {state} card shows empty lines: {empty}"
            content = sum(c["height"] for c in card["lines"])
            assert card["height"] <= content + card["frame"] + 1, f"a {state} card is taller than its lines: {card}"
            tall = [c for c in card["lines"] if c["inner"] > 3 * c["line"] + 1 and c["label"] != "Why / where"]
            assert tall == [], f"a {state} card has cells taller than three lines: {tall}"
        js(browser, "document.getElementById('queue-prev').click()")


def hours_rows(driver: Any, table: str) -> list[list[Any]]:
    """A GPU-hours table's rows: key, the name shown, GPU-hours."""
    return list(js(driver, "return Array.from(document.querySelectorAll(`#${arguments[0]} tbody tr[data-key]`))"
                           ".map(t => [t.dataset.key, t.querySelector('th').textContent, Number(t.dataset.hours)])",
                   table))


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_gpu_hours_per_team_and_class(tab: tuple[Any, Any, Any], size: tuple[int, int]) -> None:
    browser, _, runtime = tab
    with Sized(browser, size):
        js(browser, "const s = document.getElementById('hours-since'); s.value = '24h';"
                    "s.dispatchEvent(new Event('change'))")
        for by, table in (("team", "hours-team"), ("class", "hours-class")):
            report = api(runtime, f"/v1/usage?by={by}&since=24h")
            keys = sorted(r["key"] for r in report["rows"])
            assert keys, f"the usage report by {by} has rows"
            shown = wait_until(lambda t=table, k=keys: (r := hours_rows(browser, t)) and
                               sorted(x[0] for x in r) == k and r, f"GPU-hours by {by}")
            assert all(x[1] == (f"no {by}" if x[0] == "-" else x[0]) for x in shown)  # "-": none (no class)
            hours = [x[2] for x in shown]
            assert hours == sorted(hours, reverse=True) and hours[0] > 0, "most used first"
            assert visible_in_viewport(browser, f"#{table} tbody tr")
        no_sideways_scroll(browser)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_a_sweep_is_cancelled_in_one_action_after_a_confirm(tab: tuple[Any, Any, Any], size: tuple[int, int]
                                                            ) -> None:
    browser, _, runtime = tab
    trials = submit(runtime, f"hpo-{size[0]}", f"gpu: {{count: 1, models: [{A100}]}}",
                    extra="kind: sweep\nsweep: {parameters: {lr: [0.1, 0.01, 0.001, 0.0001]}, max_parallel: 2}\n")
    sweep = api(runtime, f"/v1/jobs/{trials[0]}")["sweep"]
    base = f"#sweep-rows tr[data-sweep='{sweep}']"
    with Sized(browser, size):
        wait_until(lambda: js(browser, f"return !!document.querySelector(\"{base} button.cancel-sweep\")"),
                   "the sweep's cancel button")
        js(browser, f"document.querySelector(\"{base} button.cancel-sweep\").click()")
        ask = js(browser, f"return document.querySelector(\"{base} .confirm\").textContent")
        assert "Cancel 4 unfinished trials" in ask
        assert js(browser, "return document.activeElement.dataset.confirm") == "yes"  # the keyboard is on it
        js(browser, f"document.querySelector(\"{base}\").dataset.seen = '1'")  # ...and stays there when the
        wait_until(lambda: js(browser, f"return !document.querySelector(\"{base}\").dataset.seen"),  # row is redrawn
                   "the sweep's row drawn again")
        assert js(browser, "return document.activeElement.dataset.confirm") == "yes"
        js(browser, f"document.querySelector(\"{base} [data-confirm=no]\").click()")  # changed their mind
        assert api(runtime, f"/v1/sweeps/{sweep}")["states"] == {"queued": 4}
        js(browser, f"document.querySelector(\"{base} button.cancel-sweep\").click()")
        no_sideways_scroll(browser)
        js(browser, f"document.querySelector(\"{base} [data-confirm=yes]\").click()")
        wait_until(lambda: api(runtime, f"/v1/sweeps/{sweep}")["states"] == {"cancelled": 4}, "every trial cancelled")
        wait_until(lambda: js(browser, f"return document.querySelector(\"{base} td.cancel\").textContent") == "–",
                   "no cancel left to offer")


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_no_serious_accessibility_violation_in_the_new_views(tab: tuple[Any, Any, Any], size: tuple[int, int]
                                                              ) -> None:
    browser, _, runtime = tab
    trials = submit(runtime, f"axe-{size[0]}", f"gpu: {{count: 1, models: [{A100}]}}",
                    extra="kind: sweep\nsweep: {parameters: {lr: [0.1, 0.01]}}\n")
    sweep = api(runtime, f"/v1/jobs/{trials[0]}")["sweep"]
    with Sized(browser, size):
        base = f"#sweep-rows tr[data-sweep='{sweep}']"
        wait_until(lambda: js(browser, f"return !!document.querySelector(\"{base} button.cancel-sweep\")"),
                   "the sweep's cancel button")
        js(browser, f"document.querySelector(\"{base} button.cancel-sweep\").click()")  # the confirm step open
        assert run_axe(browser) == []
        no_sideways_scroll(browser)
        js(browser, f"document.querySelector(\"{base} [data-confirm=no]\").click()")
    api(runtime, f"/v1/sweeps/{sweep}", "DELETE")
