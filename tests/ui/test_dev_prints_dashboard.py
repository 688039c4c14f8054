"""`nomad-gpu dev` prints the dashboard's address, and the page and its data answer there out of the box."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest
import requests

pytestmark = pytest.mark.e2e


def test_dev_prints_a_dashboard_address_that_serves_the_page() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "dev", "--cluster", "seed-a800"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if m := re.match(r"dashboard:\s+(http://\S+/ui)$", line.strip()):
                url = m.group(1)
        assert url is not None, "nomad-gpu dev printed no dashboard address"
        page = requests.get(url, timeout=10)
        assert page.status_code == 200 and "<title>nomad-gpu dashboard</title>" in page.text
        nodes = requests.get(url.removesuffix("/ui") + "/v1/inventory", timeout=10).json()["nodes"]
        assert len(nodes) == 1 and len(nodes[0]["gpus"]) == 8
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
