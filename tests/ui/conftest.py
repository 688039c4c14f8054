"""The dashboard in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven by Selenium).

One dev cluster (seed-a800: one node, 8 x A800) and one service with an admin token serve the whole
module, and one browser tab follows them: the tests run in file order, as a user's session would.
The tests skip, with the reason, only when the browser or its driver is not installed; CI installs both.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from harness import CLUSTERS  # noqa: E402

from nomad_gpu.devcluster import DevCluster  # noqa: E402
from nomad_gpu.nomad.connection import NomadSettings  # noqa: E402
from nomad_gpu.service.app import ServiceRuntime  # noqa: E402
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings  # noqa: E402
from nomad_gpu.service.config.usageconfig import UsageSettings  # noqa: E402

ROOT_TOKEN = "dashboard-admin-0123456789abcdef"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,800")


def chromium_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, ServiceRuntime]]:
    yield from started("seed-a800", tmp_path_factory)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, ServiceRuntime]]:
    """mixed-fleet: whole GPUs, MIG instances, shared GPUs, a CPU-only node, several node pools."""
    yield from started("mixed-fleet", tmp_path_factory)


def started(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, ServiceRuntime]]:
    dc = DevCluster(CLUSTERS / f"{cluster}.yaml", speed=50.0, heartbeat_s=1.0)
    nomad_url = dc.start()
    db = tmp_path_factory.mktemp("ui") / "queue.db"
    scheduling = SchedulingSettings(tick_s=0.5, usage=UsageSettings(interval_s=0.5))
    runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address=nomad_url), scheduling=scheduling,
                                             db_path=str(db), listen="http://127.0.0.1:0", token=ROOT_TOKEN))
    runtime.start(wait_ready_s=10)
    assert runtime.scheduler.ready.is_set(), "the service never reconciled with the dev cluster"
    yield dc, runtime
    runtime.stop()
    dc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    paths = chromium_paths()
    if paths is None:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver  # the dev extras: missing is a failure, not a skip
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="nomad-gpu-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=paths[1]))
    driver.set_page_load_timeout(20)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
