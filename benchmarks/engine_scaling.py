"""Engine scaling: does a decision cost the same at 10,000 nodes as at 1,000?

Runs `nomad-gpu bench` at both sizes, each in its own process (so rss_mib is per size), `--repeat`
times, interleaved so that machine noise hits both alike, and prints the medians and the p99 ratio
as one JSON object. Usage: python benchmarks/engine_scaling.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

SIZES = ((1000, 10_000), (10_000, 100_000))


def bench(nodes: int, queued: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "nomad_gpu.cli.main", "bench", "--nodes", str(nodes), "--queued",
                          str(queued), "--json"], check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs: dict[int, list[dict[str, float]]] = {n: [] for n, _ in SIZES}
    for _ in range(args.repeat):
        for nodes, queued in SIZES:
            runs[nodes].append(bench(nodes, queued))
    summary: dict[str, object] = {"repeat": args.repeat}
    for nodes, _ in SIZES:
        for key in ("decisions_per_s", "decision_us_p50", "decision_us_p99", "rss_mib"):
            summary[f"{key}@{nodes}"] = statistics.median(r[key] for r in runs[nodes])
    summary["p99_ratio_10k_over_1k"] = round(
        float(summary["decision_us_p99@10000"]) / float(summary["decision_us_p99@1000"]), 2)  # type: ignore[arg-type]
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
