"""Take the README's dashboard screenshot during the seed demo: 66 one-GPU jobs on 8 x A800.

    python tests/ui/dashboard_screenshot.py docs/dashboard.png [--speed 5] [--after 200]

The dev cluster (bundled seed-a800) and the service run in this process; the demo's 66 jobs of about
150 s are submitted through the API; `--after` seconds of wall time later (with time compressed by
`--speed`) headless Chromium loads the dashboard at 1280 px wide and the whole page is saved as a PNG,
reduced to a palette so the file stays small.
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import tempfile
import time
from pathlib import Path

import requests

from nomad_gpu.bundled import bundled_cluster
from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings
from nomad_gpu.service.demo import DEMO_CLUSTER, job_spec

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--speed", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=200.0, help="wall seconds between submitting and the shot")
    parser.add_argument("--width", type=int, default=1280, help="viewport width in CSS pixels (390: a phone)")
    args = parser.parse_args()

    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    dc = DevCluster(bundled_cluster(DEMO_CLUSTER), speed=args.speed, heartbeat_s=1.0)
    nomad_url = dc.start()
    tmp = Path(tempfile.mkdtemp(prefix="nomad-gpu-shot-"))
    runtime = ServiceRuntime(ServiceSettings(nomad=NomadSettings(address=nomad_url),
                                             scheduling=SchedulingSettings(tick_s=1.0), db_path=str(tmp / "queue.db"),
                                             listen="http://127.0.0.1:0"))
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in (*FLAGS, f"--user-data-dir={tmp / 'profile'}"):
        options.add_argument(flag)
    driver = None
    try:
        addr = runtime.start(wait_ready_s=10)
        rng = random.Random(0)  # the demo's durations: 150 s +- 2 %, seeded
        for i in range(66):
            text = job_spec(i, round(150.0 * (1 + 0.02 * rng.uniform(-1, 1)), 3))
            requests.post(f"{addr}/v1/jobs", data=text.encode(), headers={"Content-Type": "application/yaml"},
                          timeout=10).raise_for_status()
        time.sleep(args.after)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": args.width, "height": 800, "deviceScaleFactor": 1,
                                "mobile": args.width < 700})
        driver.get(f"{addr}/ui")
        deadline = time.monotonic() + 20
        while driver.execute_script("return document.body.dataset.loaded") != "true" and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        driver.execute_script("document.querySelector('#nodes .cell.used')?.click()")
        height = int(driver.execute_script("return document.documentElement.scrollHeight"))
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": args.width, "height": height, "scale": 1}})
        import base64

        image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
        image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
        print(f"{args.out}: {image.width} x {image.height}, {args.out.stat().st_size // 1024} KiB")
    finally:
        if driver is not None:
            driver.quit()
        runtime.stop()
        dc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
