"""Cancelled sweeps against everyone else (issue 31, item 4): one team submits and cancels a large sweep,
round after round; what do another team's `GET /v1/sweeps` and `GET /v1/usage` and the admin's
`/v1/status` cost meanwhile and after, and how large do the database and the service grow?

The dev cluster and `nomad-gpu serve` run as their own processes (the service with a database file and
three tokens: vision, nlp, admin). Before the rounds, vision submits a few jobs. Each round nlp posts a
sweep of `--trials` one-GPU trials and cancels it (DELETE /v1/sweeps/ID), while a thread asks the admin's
`/v1/status` every 50 ms and records the slowest answer (and again while the reads after the rounds run).
After the rounds: vision's sweeps and usage and the admin's status (median of 5 and the slowest), the
admin's sweeps and usage (3), the database's bytes (with its write-ahead log) and the service's RSS (also
after each round). Prints JSON.

    python benchmarks/sweep_history.py [--rounds 10] [--trials 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import requests

from nomad_gpu.service.demo import free_port, start_dev_cluster

CLUSTER = Path(__file__).resolve().parents[1] / "clusters" / "seed-a800.yaml"
VISION, NLP, ADMIN = "vision-0123456789abcdef", "nlp-0123456789abcdef00", "admin-0123456789abcdef0"
CONFIG = f"""tick_s: 1
api:
  tokens:
    {VISION}: {{team: vision}}
    {NLP}: {{team: nlp}}
    {ADMIN}: {{admin: true}}
"""
JOB = "name: mine-{i}\ntask: {{image: busybox}}\ngpu: {{count: 1}}\ndev: {{duration_s: 5}}\n"


def sweep(round_: int, trials: int) -> str:
    values = ", ".join(str(i) for i in range(trials))
    return (f"kind: sweep\nname: hp{round_}\ntask: {{image: busybox}}\ngpu: {{count: 1}}\n"
            f"dev: {{duration_s: 600}}\nsweep: {{parameters: {{seed: [{values}]}}}}\n")


class Client:
    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.session = requests.Session()
        self.session.headers.update({"X-Nomad-Gpu-Client": "bench", "Content-Type": "application/yaml"})

    def call(self, method: str, path: str, token: str, body: str | None = None) -> tuple[float, Any]:
        started = time.perf_counter()
        r = self.session.request(method, f"{self.addr}{path}", data=body.encode() if body else None,
                                 headers={"Authorization": f"Bearer {token}"}, timeout=600)
        took = time.perf_counter() - started
        r.raise_for_status()
        return took, r.json()


def timings(client: Client, path: str, token: str, n: int = 5) -> dict[str, float]:
    took = [client.call("GET", path, token)[0] for _ in range(n)]
    return {"median_s": round(statistics.median(took), 4), "max_s": round(max(took), 4)}


def db_bytes(workdir: Path) -> int:
    return sum(p.stat().st_size for p in workdir.glob("q.db*"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=10_000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="nomad-gpu-sweep-history-"))
    nomad, nomad_url = start_dev_cluster(CLUSTER, 1.0)
    addr = f"http://127.0.0.1:{free_port()}"
    (workdir / "config.yaml").write_text(CONFIG, encoding="utf-8")
    log = open(workdir / "service.log", "wb")  # noqa: SIM115 (kept open for the child's life)
    service = subprocess.Popen([sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", str(workdir / "q.db"),
                                "--listen", addr, "--config", str(workdir / "config.yaml")],
                               env={**os.environ, "NOMAD_ADDR": nomad_url}, stdout=log, stderr=log)
    client = Client(addr)
    report: dict[str, Any] = {"rounds": args.rounds, "trials": args.trials}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.call("GET", "/v1/status", ADMIN)[1].get("ready"):
                    break
            except (requests.RequestException, ValueError):
                time.sleep(0.2)
        proc = psutil.Process(service.pid)
        for i in range(4):
            client.call("POST", "/v1/jobs", VISION, JOB.format(i=i))
        time.sleep(2)
        report["before"] = {"vision_sweeps": timings(client, "/v1/sweeps", VISION),
                            "vision_usage": timings(client, "/v1/usage", VISION),
                            "admin_status": timings(client, "/v1/status", ADMIN),
                            "db_mib": round(db_bytes(workdir) / 2**20, 2),
                            "rss_mib": round(proc.memory_info().rss / 2**20, 1)}
        phase = ["rounds"]
        slowest = {"rounds": 0.0, "reads": 0.0}
        stop = threading.Event()

        def watch() -> None:
            watcher = Client(addr)
            while not stop.wait(0.05):
                during = phase[0]  # the phase the request started in
                slowest[during] = max(slowest[during], watcher.call("GET", "/v1/status", ADMIN)[0])

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        rounds: list[float] = []
        grown: list[tuple[float, float]] = []
        for r in range(args.rounds):
            started = time.perf_counter()
            _, body = client.call("POST", "/v1/jobs", NLP, sweep(r, args.trials))
            client.call("DELETE", f"/v1/sweeps/{body['entries'][0]['sweep']}", NLP)
            rounds.append(round(time.perf_counter() - started, 2))
            grown.append((round(db_bytes(workdir) / 2**20, 2), round(proc.memory_info().rss / 2**20, 1)))
            print(json.dumps({"round": r, "s": rounds[-1], "db_mib": grown[-1][0], "rss_mib": grown[-1][1]}),
                  file=sys.stderr, flush=True)
        phase[0] = "reads"  # from here: while vision and the admin read sweeps and usage
        report["admin_status_slowest_during_s"] = round(slowest["rounds"], 4)
        report["round_s"] = rounds
        report["round_db_mib"] = [db for db, _ in grown]
        report["round_rss_mib"] = [rss for _, rss in grown]
        report["after"] = {"vision_sweeps": timings(client, "/v1/sweeps", VISION),
                           "vision_usage": timings(client, "/v1/usage", VISION),
                           "admin_status": timings(client, "/v1/status", ADMIN),
                           "admin_sweeps": timings(client, "/v1/sweeps", ADMIN, 3),
                           "admin_usage": timings(client, "/v1/usage", ADMIN, 3),
                           "db_mib": round(db_bytes(workdir) / 2**20, 2),
                           "rss_mib": round(proc.memory_info().rss / 2**20, 1)}
        stop.set()
        thread.join(30)
        report["admin_status_slowest_during_reads_s"] = round(slowest["reads"], 4)
        report["nlp_usage"] = client.call("GET", "/v1/usage", NLP)[1]["rows"]
    finally:
        service.terminate()
        service.wait(30)
        nomad.terminate()
        nomad.wait(10)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
