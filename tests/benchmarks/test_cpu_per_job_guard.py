"""The regression guard of the service's CPU per job: `benchmarks/scale.py --against-bare`, small (50 nodes,
300 jobs, 4 clients), must keep the service within LIMIT times the bare python-nomad loop's CPU per job.
Three repeats in one run, the ratio of each measured side by side; their median is judged.

LIMIT guards against a 2x regression, not the 1.5x goal: today this run gives 3.3-3.6x on a 2-core machine
at load 9.4 (docs/benchmarks.md, "CPU per job"), so it is 6x, twice the 3x at which it will stand once
the ratio is under 1.5x (then lower it to 3).

A machine loaded far past its cores measures contention (the service's threads wait and hand the GIL over
more, the bare loop is one thread), so the test is skipped, saying why, when the 1-minute load average
exceeds five times the cores before the run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SCALE = Path(__file__).resolve().parents[2] / "benchmarks" / "scale.py"
LIMIT = 6.0
LOAD_PER_CORE = 5.0


def test_service_cpu_per_job_within_the_limit_of_the_bare_loop() -> None:
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load > LOAD_PER_CORE * cores:
        pytest.skip(f"load average {load:.1f} on {cores} cores (over {LOAD_PER_CORE:g} per core): the ratio would "
                    "measure the machine's contention, not the service")
    done = subprocess.run(
        [sys.executable, str(SCALE), "--nodes", "50", "--jobs", "300", "--trials", "0", "--clients", "4",
         "--against-bare", "--repeat", "3", "--timeout-s", "300"],
        capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    ratios = [run["service_vs_bare"] for run in report["runs"]]
    median = statistics.median(ratios)
    assert median <= LIMIT, (
        f"the service spends {median:.2f}x the bare loop's CPU per job (runs: {ratios}; load average "
        f"{report['load_average_before']} -> {report['load_average_after']} on {cores} cores); profile it with "
        "`python benchmarks/scale.py --nodes 50 --jobs 300 --trials 0 --clients 4 --against-bare --profile FILE`")
