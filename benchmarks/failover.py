"""Failover of `nomad-gpu serve` replicas on PostgreSQL (DESIGN 18): three replicas on one database against the
dev cluster, N mixed jobs submitted to any replica, the leader SIGKILLed k times and SIGSTOPped past its lease
m times (then resumed: it must send nothing more to Nomad and end), the database server restarted r times.
Judged by the dev cluster's audit: jobs lost, run twice, double bookings, writes from a deposed leader; and
the time from each fault to the next admission (a register under the new epoch), and the replicas' CPU per
job (with `--compare-cpu`, also one replica without faults on PostgreSQL and on SQLite, the same jobs).
Prints the report as JSON.

    python benchmarks/failover.py [--jobs 120] [--kills 3] [--pauses 1] [--lease-s 3] [--seed 0]
    python benchmarks/failover.py --jobs 1000 --kills 10 --pauses 3 --db-restarts 1 --compare-cpu   # the full run

Without `--postgres` it starts a throwaway server (tests/store/pg.py: initdb, a free loopback port) and removes it
after; with it, the given database must be empty.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nomad_gpu.devcluster.replicas import FailoverConfig, run_failover  # noqa: E402

CLUSTER = Path(__file__).resolve().parents[1] / "clusters" / "mixed-fleet.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--pauses", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--lease-s", type=float, default=3.0)
    parser.add_argument("--speed", type=float, default=60.0)
    parser.add_argument("--submit-over-s", type=float, default=30.0)
    parser.add_argument("--gap-s", type=float, default=6.0, help="wall time between two faults")
    parser.add_argument("--db-restarts", type=int, default=0, help="restart the throwaway database server this often")
    parser.add_argument("--compare-cpu", action="store_true",
                        help="then run the same jobs without faults on one replica, PostgreSQL then SQLite, for the "
                             "service's CPU per job on each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres", default="", help="an empty database's URL (default: a throwaway server)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the replicas' logs here")
    args = parser.parse_args()

    def run(dsn: str, restart: Callable[[], None] | None = None, *, faults: bool = True, replicas: int = 0,
            workdir: Path | None = args.workdir) -> dict[str, Any]:
        cfg = FailoverConfig(cluster=CLUSTER, dsn=dsn, replicas=replicas or args.replicas, jobs=args.jobs,
                             kills=args.kills if faults else 0, pauses=args.pauses if faults else 0,
                             db_restarts=args.db_restarts if faults and restart else 0, restart_db=restart,
                             lease_s=args.lease_s, speed=args.speed, submit_over_s=args.submit_over_s,
                             gap_s=args.gap_s, seed=args.seed, workdir=workdir)
        return run_failover(cfg, progress=lambda m: print(m, file=sys.stderr, flush=True))

    if args.postgres:
        report = run(args.postgres)
    else:
        from tests.store.pg import restart, throwaway_server

        with throwaway_server(durable=True) as (server, data):
            report = run(server.dsn(server.create_database()), lambda: restart(data))
            if args.compare_cpu:  # the same jobs, no fault, one replica: the store's share of the CPU
                on_pg = run(server.dsn(server.create_database()), faults=False, replicas=1, workdir=None)
                with tempfile.TemporaryDirectory() as tmp:
                    on_sqlite = run(str(Path(tmp) / "queue.db"), faults=False, replicas=1, workdir=None)
                report["cpu_ms_per_job_one_replica"] = {"postgresql": on_pg["replicas_cpu_ms_per_job"],
                                                        "sqlite": on_sqlite["replicas_cpu_ms_per_job"]}
                report["cpu_runs_settled_and_clean"] = all(
                    r["settled"] and not (r["lost"] or r["run_twice"] or r["double_bookings"])
                    for r in (on_pg, on_sqlite))
    print(json.dumps(report, indent=2))
    bad = (report["lost"] or report["run_twice"] or report["double_bookings"] or report["left_running"]
           or report["unknown_jobs"] or report["writes_from_deposed_leaders_after_resume"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
