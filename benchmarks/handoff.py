"""End-to-end handoff latency: `nomad-gpu demo` several times, medians of its audit-derived figures.

Usage: python benchmarks/handoff.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

KEYS = ("handoff_ms_p50", "handoff_ms_p99", "gpu_utilization", "makespan_s", "wall_s", "double_bookings",
        "jobs_completed", "peak_gpus_in_use")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, "-m", "nomad_gpu.cli.main", "demo", "--json"], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out))
    summary = {k: statistics.median(r[k] for r in runs) for k in KEYS}
    summary["runs"] = [{k: r[k] for k in ("handoff_ms_p50", "handoff_ms_p99", "gpu_utilization")} for r in runs]
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
