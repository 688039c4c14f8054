"""The chaos run: `nomad-gpu serve` against the dev cluster while both are made to fail.

The service runs as its own process on one SQLite file and is killed with SIGKILL and restarted;
the dev cluster, in this process, loses register replies after applying them, cuts event streams,
becomes unreachable for a while, loses its leader (an election: election.py), has GPUs turn unhealthy
for a while (devicehealth.py) and garbage-collects finished jobs while the service is down; a
share of the jobs is cancelled soon after submission. Nothing here imports the service: the run is
judged from the outside, by the dev cluster's audit and the service's public API, never by the
service's own belief (the verdict: chaosverdict.py).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from .chaosverdict import TERMINAL, judge
from .partitions import busy_node
from .server import DevCluster
from .tenancy import still_live
from .version import DEFAULT_NOMAD_VERSION

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChaosConfig:
    cluster: Path
    jobs: int = 200
    kills: int = 10
    lost_replies: int = 8
    stream_cuts: int = 6
    outage_s: float = 15.0
    elections: int = 0
    election_s: float = 8.0
    """Each election: no leader for this long (writes and default reads answer 500 after a 5 s hold)."""
    unhealthy_gpus: int = 0
    unhealthy_s: float = 10.0
    """Each unhealthy GPU (or MIG or share instance): reported unhealthy for this long, then healthy again."""
    partitions: int = 0
    partition_s: float = 60.0
    """Each partition: a node with jobs running stops heartbeating this long, in job seconds (partitions.py)."""
    cancel_share: float = 0.15
    speed: float = 60.0
    duration_s: tuple[float, float] = (60.0, 240.0)
    """Task run time in job seconds (wall time is this over `speed`)."""
    submit_over_s: float = 20.0
    """Submissions are spread over this much wall time, so faults strike while jobs arrive."""
    seed: int = 0
    timeout_s: float = 900.0
    nomad_version: str = ""
    workdir: Path | None = None


@dataclass
class _Run:
    cfg: ChaosConfig
    dc: DevCluster
    db: Path
    log: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Idempotency key -> the entry the service acknowledged."""
    cancelled_at: dict[str, float] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    kills_done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def addr(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def job_spec(i: int, rng: random.Random, duration_s: float) -> tuple[str, str]:
    """A mix of shapes: whole GPUs (one and a two-GPU gang), MIG slices and time-slice shares."""
    kind = rng.choices(["gpu1", "gpu2", "mig", "share"], weights=[5, 2, 2, 1])[0]
    ask = {"gpu1": "gpu: {count: 1}", "gpu2": "gpu: {count: 2}", "mig": "mig: {profile: 1g.10gb}",
           "share": "share: {milli: 500}"}[kind]
    return kind, (f"name: chaos-{i:04d}\nteam: t{i % 3}\nretries: 0\ntask: {{image: busybox}}\n"
                  f"resources: {{cpu: 1000, memory: 1024}}\n{ask}\ndev: {{duration_s: {duration_s:.1f}}}\n")


def run_chaos(cfg: ChaosConfig, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    workdir = cfg.workdir or Path(tempfile.mkdtemp(prefix="nomad-gpu-chaos-"))
    dc = DevCluster(cfg.cluster, speed=cfg.speed, nomad_version=cfg.nomad_version or DEFAULT_NOMAD_VERSION)
    dc.start()
    run = _Run(cfg, dc, workdir / "queue.db", workdir / "service.log", _free_port())
    (workdir / "config.yaml").write_text("tick_s: 1\n", encoding="utf-8")
    started = time.time()
    try:
        _start_service(run)
        rng = random.Random(cfg.seed)
        specs = [job_spec(i, rng, rng.uniform(*cfg.duration_s)) for i in range(cfg.jobs)]
        submitter = threading.Thread(target=_submit_all, args=(run, specs, rng.random), daemon=True)
        submitter.start()
        _inject(run, random.Random(cfg.seed + 1), progress)
        submitter.join(cfg.timeout_s)
        settled = _wait_settled(run, started + cfg.timeout_s, progress)
        entries = _entries(run)
        audit = dc.audit()
    finally:
        _kill(run)
        dc.stop()
    report = judge(audit, entries, run.acked, run.cancelled_at, run.faults, {k for k, _ in specs})
    report.update(settled=settled, kills=run.kills_done, wall_s=round(time.time() - started, 1), jobs=cfg.jobs,
                  speed=cfg.speed, nomad_version=audit.get("nomad_version"))
    return report


# ---- the service process ---------------------------------------------------------------------------
def _start_service(run: _Run) -> None:
    env = {**os.environ, "NOMAD_ADDR": run.dc.url}
    env.pop("NOMAD_TOKEN", None)
    with open(run.log, "ab") as log:
        run.proc = subprocess.Popen(
            [sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", str(run.db), "--listen", run.addr,
             "--config", str(run.db.parent / "config.yaml")], env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{run.addr}/v1/status", timeout=1).json().get("ready"):
                return
        except (requests.RequestException, ValueError):
            pass
        if run.proc.poll() is not None:
            raise RuntimeError(f"the service exited with {run.proc.returncode}; see {run.log}")
        time.sleep(0.05)
    raise RuntimeError(f"the service did not become ready in 30 s; see {run.log}")


def _kill(run: _Run) -> None:
    if run.proc is not None and run.proc.poll() is None:
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait(10)


def _call(run: _Run, method: str, path: str, **kw: Any) -> requests.Response | None:
    try:
        headers = {"Content-Type": "application/yaml", "X-Nomad-Gpu-Client": "chaos", **kw.pop("headers", {})}
        return requests.request(method, f"{run.addr}{path}", timeout=5, headers=headers, **kw)
    except requests.RequestException:
        return None  # the service is down (killed): the caller retries, as a user's script would


def _submit_all(run: _Run, specs: list[tuple[str, str]], draw: Callable[[], float]) -> None:
    gap = run.cfg.submit_over_s / max(1, len(specs))
    for i, (_, text) in enumerate(specs):
        key = f"chaos-{i}"
        cancel = draw() < run.cfg.cancel_share
        while True:  # Idempotency-Key makes a repeat after a lost reply or a kill harmless
            r = _call(run, "POST", "/v1/jobs", data=text.encode(), headers={"Idempotency-Key": key})
            if r is not None and r.status_code == 201:
                with run.lock:
                    run.acked[key] = r.json()["entries"][0]
                break
            time.sleep(0.1)
        if cancel:
            threading.Thread(target=_cancel_soon, args=(run, key, draw() * 2.0), daemon=True).start()
        time.sleep(gap)


def _cancel_soon(run: _Run, key: str, after_s: float) -> None:
    time.sleep(after_s)
    entry_id = run.acked[key]["id"]
    while True:
        r = _call(run, "DELETE", f"/v1/jobs/{entry_id}")
        if r is not None and r.status_code == 200:
            with run.lock:
                run.cancelled_at[entry_id] = time.time()
            return
        time.sleep(0.1)


# ---- faults -----------------------------------------------------------------------------------------
def _inject(run: _Run, rng: random.Random, progress: Callable[[str], None]) -> None:
    """Kills, lost replies, stream cuts, elections and one outage, spread over the submission window and after."""
    cfg = run.cfg
    window = max(cfg.submit_over_s * 1.5, 10.0)
    plan: list[tuple[float, str]] = [(rng.uniform(0.5, window), "kill") for _ in range(cfg.kills)]
    plan += [(rng.uniform(0.5, window), "lose") for _ in range(cfg.lost_replies)]
    plan += [(rng.uniform(0.5, window), "cut") for _ in range(cfg.stream_cuts)]
    plan += [(rng.uniform(0.5, window), "sick") for _ in range(cfg.unhealthy_gpus)]
    plan += [(rng.uniform(0.5, window), "partition") for _ in range(cfg.partitions)]
    outage_at = window * 0.6
    # a restart waits out an election (the service reconciles before it is ready) and the plan with it;
    # an election that ended just before the outage would send the queue's backlog into its first second
    spans = [(0.5, outage_at - cfg.election_s - 5), (outage_at + cfg.outage_s, window + cfg.outage_s + 10)]
    if cfg.outage_s <= 0:
        spans = [(0.5, window)]
    spans = [(lo, hi) for lo, hi in spans if hi > lo]
    for _ in range(cfg.elections):
        at = rng.uniform(0, sum(hi - lo for lo, hi in spans))
        for lo, hi in spans:
            if at <= hi - lo:
                break
            at -= hi - lo
        plan.append((lo + at, "election"))
    if cfg.outage_s > 0:
        plan.append((outage_at, "outage"))
    begin, wall_begin = time.monotonic(), time.time()
    for at, what in sorted(plan):
        time.sleep(max(0.0, begin + at - time.monotonic()))
        now = time.time()
        if what == "kill":
            _kill(run)
            run.kills_done += 1
            if run.kills_done % 3 == 0:  # finished jobs are collected while nobody watches
                run.dc.collect_garbage()
            time.sleep(rng.uniform(0.2, 1.5))
            _start_service(run)
            run.faults.append({"kind": "kill", "at": now, "end": time.time()})
        elif what == "lose":
            run.dc.lose_replies(1, rng.choice(["reset", "close"]))
            run.faults.append({"kind": "lost_reply", "at": now, "end": now})
        elif what == "cut":
            run.dc.drop_streams()
            run.faults.append({"kind": "stream_cut", "at": now, "end": now})
        elif what == "sick":  # heals by itself while the plan goes on
            node, device = rng.choice([(n.id, i) for n in run.dc.state.nodes.values() for g in n.groups for i in g.ids])
            run.dc.device_unhealthy(node, device, "XID 79: GPU has fallen off the bus (chaos)")
            threading.Timer(cfg.unhealthy_s, run.dc.device_healthy, (node, device)).start()
            run.faults.append({"kind": "unhealthy_gpu", "at": now, "end": now + cfg.unhealthy_s})
        elif what == "partition":  # a node with work on it, after any election (only a leader marks a silent node)
            time.sleep(max(0.0, max((f["end"] for f in run.faults if f["kind"] == "election"), default=0.0) + 1 - now))
            node = busy_node(run.dc.state, rng.choice)  # one with a task running, not cut off already
            now = time.time()  # it heals by itself while the plan goes on
            run.dc.partition(node)
            threading.Timer(cfg.partition_s / cfg.speed, run.dc.heal, (node,)).start()
            run.faults.append({"kind": "partition", "at": now, "end": now + cfg.partition_s / cfg.speed})
        elif what == "election":  # runs on by itself while the plan goes on; one at a time, 2 s apart
            last = max((f["end"] for f in run.faults if f["kind"] in ("election", "partition")), default=0.0)
            time.sleep(max(0.0, last + 2.0 - now))
            now = time.time()
            run.dc.election(cfg.election_s)
            run.faults.append({"kind": "election", "at": now, "end": now + cfg.election_s})
        else:
            run.dc.unreachable(cfg.outage_s)
            time.sleep(cfg.outage_s)
            run.faults.append({"kind": "outage", "at": now, "end": time.time()})
        progress(f"{what} at +{now - wall_begin:.1f} s")


def _entries(run: _Run) -> list[dict[str, Any]]:
    r = _call(run, "GET", "/v1/jobs")
    return list(r.json()["entries"]) if r is not None and r.status_code == 200 else []


def _wait_settled(run: _Run, deadline: float, progress: Callable[[str], None]) -> bool:
    while time.time() < deadline:
        entries = _entries(run)
        live = [a for a in run.dc.audit()["allocations"] if still_live(a)]
        if len(entries) >= len(run.acked) and all(e["state"] in TERMINAL for e in entries) and not live:
            return True
        time.sleep(0.5)
    progress("timed out waiting for the queue to settle")
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
