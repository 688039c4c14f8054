"""Several `nomad-gpu serve` replicas on one PostgreSQL database, against the dev cluster, and the failover run.

Each replica is a process of its own (`serve --db postgresql://...`), so a leader can be killed with SIGKILL
(its session ends with it) or paused with SIGSTOP past its lease (its session stays open). A killed or deposed
replica is started again, as a supervisor (Nomad's restart block) would, and comes back as a standby.
The run is judged from the outside, as the chaos run is (chaos.py `judge`): the dev cluster's audit, and its
write log (writelog.py), which names the process behind every write to Nomad.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests

from .chaos import _free_port, job_spec
from .chaosverdict import TERMINAL, judge
from .server import DevCluster
from .version import DEFAULT_NOMAD_VERSION

HEADERS = {"Content-Type": "application/yaml", "X-Nomad-Gpu-Client": "failover"}


@dataclass
class Replica:
    name: str
    dsn: str
    nomad: str
    workdir: Path
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def addr(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self, config: Path) -> None:
        env = {**os.environ, "NOMAD_ADDR": self.nomad}
        env.pop("NOMAD_TOKEN", None)
        with open(self.workdir / f"{self.name}.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", self.dsn, "--listen", self.addr,
                 "--config", str(config)], env=env, stdout=log, stderr=log)
        self.paused = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            self.paused = sig is signal.SIGSTOP

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def status(self, timeout_s: float = 1.0) -> dict[str, Any] | None:
        if not self.alive() or self.paused:
            return None
        try:
            r = requests.get(f"{self.addr}/v1/status", timeout=timeout_s)
            return dict(r.json()) if r.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return None


def write_config(workdir: Path, lease_s: float) -> Path:
    path = workdir / "config.yaml"
    path.write_text(f"tick_s: 1\nha:\n  lease: {lease_s}s\n", encoding="utf-8")
    return path


def leader_of(replicas: list[Replica], *, timeout_s: float, exclude: Replica | None = None) -> Replica:
    """The replica that reports itself the leader, ready (not ``exclude``), within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in replicas:
            if r is exclude:
                continue
            s = r.status(0.5)
            if s is not None and s.get("role") == "leader" and s.get("ready"):
                return r
        time.sleep(0.05)
    raise RuntimeError(f"no replica led within {timeout_s} s")


def call(replicas: list[Replica], method: str, path: str, **kw: Any) -> requests.Response | None:
    """A request to any replica that answers (a user's client with several addresses)."""
    headers = {**HEADERS, **kw.pop("headers", {})}  # every try carries them (an Idempotency-Key above all)
    for r in random.sample(replicas, len(replicas)):
        if not r.alive() or r.paused:
            continue
        try:
            reply = requests.request(method, f"{r.addr}{path}", timeout=5, headers=headers, **kw)
        except requests.RequestException:
            continue
        if reply.status_code != 503:
            return reply
    return None


# ---- the failover run ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailoverConfig:
    cluster: Path
    dsn: str
    replicas: int = 3
    jobs: int = 120
    kills: int = 3
    pauses: int = 1
    lease_s: float = 3.0
    speed: float = 60.0
    duration_s: tuple[float, float] = (30.0, 120.0)
    submit_over_s: float = 30.0
    gap_s: float = 6.0
    """Wall time between two faults (after the previous takeover)."""
    seed: int = 0
    timeout_s: float = 900.0
    workdir: Path | None = None
    db_restarts: int = 0
    restart_db: Callable[[], None] | None = None
    """Restarts the database server (every session ends): the run's `db_restarts` faults."""


@dataclass
class _Failover:
    cfg: FailoverConfig
    dc: DevCluster
    replicas: list[Replica]
    config: Path
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    cpu: dict[int, float] = field(default_factory=dict)
    """Each replica process's CPU seconds (user + system), as last sampled."""


def run_failover(cfg: FailoverConfig, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    workdir = cfg.workdir or Path(tempfile.mkdtemp(prefix="nomad-gpu-failover-"))
    workdir.mkdir(parents=True, exist_ok=True)
    dc = DevCluster(cfg.cluster, speed=cfg.speed, nomad_version=DEFAULT_NOMAD_VERSION)
    dc.start()
    run = _Failover(cfg, dc, [Replica(f"r{i}", cfg.dsn, dc.url, workdir) for i in range(cfg.replicas)],
                    write_config(workdir, cfg.lease_s))
    started = time.time()
    try:
        for r in run.replicas:
            r.start(run.config)
        leader_of(run.replicas, timeout_s=60)
        threading.Thread(target=_sample_cpu, args=(run,), daemon=True).start()
        rng = random.Random(cfg.seed)
        specs = [job_spec(i, rng, rng.uniform(*cfg.duration_s)) for i in range(cfg.jobs)]
        submitter = threading.Thread(target=_submit_all, args=(run, specs), daemon=True)
        submitter.start()
        _inject(run, random.Random(cfg.seed + 1), progress)
        submitter.join(cfg.timeout_s)
        settled = _wait_settled(run, started + cfg.timeout_s)
        listed = call(run.replicas, "GET", "/v1/jobs")
        entries = list(listed.json()["entries"]) if listed is not None and listed.status_code == 200 else []
        audit = dc.audit()
    finally:
        for rep in run.replicas:
            rep.kill()
        dc.stop()
    if cfg.workdir is not None:  # what the verdict rests on, for a reader who doubts it
        for name, data in (("entries", entries), ("audit", audit), ("acked", run.acked), ("faults", run.faults)):
            (workdir / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    report = judge(audit, entries, run.acked, {}, [], {k for k, _ in specs})
    report.update(_timings(run.faults, audit), settled=settled, wall_s=round(time.time() - started, 1),
                  jobs=cfg.jobs, replicas=cfg.replicas, lease_s=cfg.lease_s, speed=cfg.speed,
                  replicas_cpu_s=round(sum(run.cpu.values()), 2),
                  replicas_cpu_ms_per_job=round(sum(run.cpu.values()) * 1000 / max(1, cfg.jobs), 1))
    for key in ("refused_requests_max_per_s", "refused_requests_worst_second", "replies_lost", "no_leader_refused",
                "cancel_stop_s_max", "cancels_never_stopped", "recovery_s", "faults", "placed_on_unhealthy"):
        report.pop(key, None)
    return report


def _submit_all(run: _Failover, specs: list[tuple[str, str]]) -> None:
    gap = run.cfg.submit_over_s / max(1, len(specs))
    for i, (_, text) in enumerate(specs):
        key = f"failover-{i}"
        while True:  # Idempotency-Key: a repeat after a takeover is stored once
            r = call(run.replicas, "POST", "/v1/jobs", data=text.encode(), headers={"Idempotency-Key": key})
            if r is not None and r.status_code == 201:
                with run.lock:
                    run.acked[key] = r.json()["entries"][0]
                break
            time.sleep(0.1)
        time.sleep(gap)


def _sample_cpu(run: _Failover) -> None:
    """Every replica process's CPU, sampled twice a second (a killed one's last half second is missed)."""
    while True:
        for r in run.replicas:
            try:
                if r.alive():
                    times = psutil.Process(r.pid).cpu_times()
                    run.cpu[r.pid] = times.user + times.system
            except psutil.Error:
                pass
        time.sleep(0.5)


def _inject(run: _Failover, rng: random.Random, progress: Callable[[str], None]) -> None:
    kinds = ["kill"] * run.cfg.kills + ["pause"] * run.cfg.pauses + ["db_restart"] * run.cfg.db_restarts
    rng.shuffle(kinds)
    for kind in kinds:
        time.sleep(run.cfg.gap_s)
        for r in run.replicas:  # one that ended by itself (deposed in a database restart's race): its supervisor
            if not r.alive() and not r.paused:
                r.start(run.config)
        old = leader_of(run.replicas, timeout_s=60)
        fault: dict[str, Any] = {"kind": kind, "pid": old.pid, "epoch": (old.status() or {}).get("epoch")}
        fault["at"] = time.time()
        if kind == "db_restart":
            assert run.cfg.restart_db is not None, "db_restarts needs restart_db"
            run.cfg.restart_db()
            new = leader_of(run.replicas, timeout_s=60)
            fault["takeover_s"] = round(time.time() - fault["at"], 3)
            fault["new_epoch"] = (new.status() or {}).get("epoch")
            run.faults.append(fault)
            progress(f"database restart: a replica leads (epoch {fault['new_epoch']}) {fault['takeover_s']} s after")
            continue
        if kind == "kill":
            old.kill()
        else:
            old.signal(signal.SIGSTOP)
        new = leader_of(run.replicas, timeout_s=60, exclude=old)
        fault["takeover_s"] = round(time.time() - fault["at"], 3)
        fault["new_epoch"] = (new.status() or {}).get("epoch")
        if kind == "pause":
            time.sleep(1.0)  # the new leader admits while the old one is still stopped
            fault["resumed_at"] = time.time()
            old.signal(signal.SIGCONT)
            if old.proc is not None:
                try:
                    fault["exit_code"] = old.proc.wait(30)  # deposed: it fences and ends
                except subprocess.TimeoutExpired:
                    fault["exit_code"] = None
                    old.kill()
        old.start(run.config)  # its supervisor starts it again: a standby
        run.faults.append(fault)
        progress(f"{kind} of the leader (epoch {fault['epoch']}): replica took over in {fault['takeover_s']} s")


def _wait_settled(run: _Failover, deadline: float) -> bool:
    while time.time() < deadline:
        r = call(run.replicas, "GET", "/v1/jobs")
        entries = list(r.json()["entries"]) if r is not None and r.status_code == 200 else []
        live = [a for a in run.dc.audit()["allocations"] if a["client_status"] in ("pending", "running")]
        if len(entries) >= len(run.acked) and all(e["state"] in TERMINAL for e in entries) and not live:
            return True
        time.sleep(0.5)
    return False


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _timings(faults: list[dict[str, Any]], audit: dict[str, Any]) -> dict[str, Any]:
    """From the audit's write log: the next admission (a register under a newer epoch) after each fault; every
    write that reached Nomad from a paused leader after its pause (one on the wire when it was paused may land),
    and after it was resumed (none may)."""
    registers = sorted((w for w in audit.get("writes", []) if w["method"] in ("POST", "PUT") and w["status"] == 200
                        and w["path"].startswith("/v1/job")), key=lambda w: w["at"])
    after: dict[str, list[float]] = {"kill": [], "pause": [], "db_restart": []}
    deposed_writes, deposed_late = 0, 0
    details: list[dict[str, Any]] = []
    for f in faults:
        newer = [w for w in registers if w["at"] > f["at"] and w.get("epoch") not in (None, str(f["epoch"]))]
        if newer:
            after[f["kind"]].append(newer[0]["at"] - f["at"])
        if f["kind"] == "pause":
            mine = [w for w in audit.get("writes", []) if f"pid {f['pid']})" in w["agent"] and w["at"] >= f["at"]]
            deposed_writes += len(mine)
            deposed_late += sum(1 for w in mine if w["at"] >= f["resumed_at"])
            details += [{"method": w["method"], "path": w["path"], "status": w["status"], "epoch": w["epoch"],
                         "s_after_pause": round(w["at"] - f["at"], 3),
                         "s_after_resume": round(w["at"] - f["resumed_at"], 3)} for w in mine]
    return {
        "takeover_s": {k: [f["takeover_s"] for f in faults if f["kind"] == k] for k in ("kill", "pause", "db_restart")},
        "next_admission_after_kill_s": {"p50": _percentile(after["kill"], 0.5), "p99": _percentile(after["kill"], 0.99),
                                        "n": len(after["kill"])},
        "next_admission_after_pause_s": {"p50": _percentile(after["pause"], 0.5),
                                         "p99": _percentile(after["pause"], 0.99), "n": len(after["pause"])},
        "next_admission_after_db_restart_s": after["db_restart"],
        "db_restarts": sum(1 for f in faults if f["kind"] == "db_restart"),
        "writes_from_deposed_leaders": deposed_writes,
        "writes_from_deposed_leaders_after_resume": deposed_late,
        "writes_from_deposed_leaders_detail": details,
        "deposed_exit_codes": [f.get("exit_code") for f in faults if f["kind"] == "pause"],
        "kills": sum(1 for f in faults if f["kind"] == "kill"),
        "pauses": sum(1 for f in faults if f["kind"] == "pause"),
    }
