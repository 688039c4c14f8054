"""The full chaos run (the faults issue): >= 200 jobs of mixed shapes through `nomad-gpu serve` against
the dev cluster while the service is SIGKILLed and restarted >= 10 times on the same database, register
replies are lost after Nomad applied them, event streams are cut, Nomad is unreachable for 15 s,
its servers lose their leader (elections of 8 s), GPUs turn unhealthy for 10 s (the device plugin's
health), nodes with jobs running are cut off from the servers for 60 s of job time (partitions: the
tasks run on, the allocations turn unknown or lost), finished jobs are garbage-collected while the service
is down, and a share of the jobs is cancelled soon after submission. Judged by the dev cluster's audit.
Prints the report as JSON.

    python benchmarks/chaos.py [--jobs 200] [--kills 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nomad_gpu.devcluster.chaos import ChaosConfig, run_chaos

CLUSTER = Path(__file__).resolve().parents[1] / "clusters" / "mixed-fleet.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--lost-replies", type=int, default=10)
    parser.add_argument("--stream-cuts", type=int, default=8)
    parser.add_argument("--outage-s", type=float, default=15.0)
    parser.add_argument("--elections", type=int, default=2)
    parser.add_argument("--election-s", type=float, default=8.0)
    parser.add_argument("--unhealthy-gpus", type=int, default=3)
    parser.add_argument("--unhealthy-s", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--partition-s", type=float, default=60.0, help="in job seconds (wall: over --speed)")
    parser.add_argument("--speed", type=float, default=60.0)
    parser.add_argument("--submit-over-s", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nomad-version", default="")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the database and service log here")
    args = parser.parse_args()
    cfg = ChaosConfig(cluster=CLUSTER, jobs=args.jobs, kills=args.kills, lost_replies=args.lost_replies,
                      stream_cuts=args.stream_cuts, outage_s=args.outage_s,
                      elections=args.elections, election_s=args.election_s, speed=args.speed,
                      unhealthy_gpus=args.unhealthy_gpus, unhealthy_s=args.unhealthy_s,
                      partitions=args.partitions, partition_s=args.partition_s,
                      submit_over_s=args.submit_over_s, seed=args.seed, nomad_version=args.nomad_version,
                      workdir=args.workdir, timeout_s=1200.0)
    report = run_chaos(cfg, progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(report, indent=2))
    bad = report["lost"] or report["run_twice"] or report["double_bookings"] or report["left_running"] \
        or report["unknown_jobs"] or report["refused_requests_max_per_s"] >= 10 or report["placed_on_unhealthy"] \
        or report["live_tenants_max"] > 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
