"""Idle reclaim on the openb trace: no reclaim, a fixed culler and the queue-aware policy, side by side.

The queueing replay of benchmarks/classes.py (`--replay`: arrivals at `creation_time / speedup`, each task
holding its placement for its run time in the trace, the service's own cycle with the `frag-aware`
policy, on a seeded sample of the openb nodes), with the trace's fractional `BE` tasks (one GPU, less than
1000 milli) played as interactive sessions that hold one whole GPU each (the whole-GPU habit the product
exists for: a notebook on its own GPU); every other task asks what the trace says (shares of a GPU for
fractional tasks, whole GPUs otherwise).

A session's GPU alternates between active and idle periods, exponentially distributed (a two-state
continuous-time Markov chain, as Grzelka models exploratory GPU sessions, editing phases between
executions: "GPU Resource Sharing in Interactive User Sessions", HPI; NotebookOS, Carver et al., ASPLOS
2026, arXiv 2503.20591, finds production notebook sessions long-running with intermittent and sporadic GPU
use). Active periods last `--active-min` minutes on average (an assumption, not a measurement); idle
periods are sized so that the idle share is 70, 80 or 90 % (the 70-90 % the product's issue 35 starts
from). Every policy replays the same sessions with the same periods (paired seeds).

- `none`: no reclaim.
- `fixed`: a culler as JupyterHub's: a session idle for 30 min is stopped, whether or not anyone waits.
- `queue-aware`: the service's policy (`classes.interactive.idle` defaults: stop after 30 min idle, only
  while a waiting job would be admitted on the freed GPU; domain/idle.py `judge` and domain/reclaimfit.py
  `beneficiary`, the code the service runs), one take-back per waiting job while it drains.

A stopped session's GPU is freed after Nomad's default 5 s kill_timeout. Its user comes back at the start
of its next active period and submits it again for the rest of its time (its wait is counted apart, as
`interactive (restart)`): stopping a session costs its user a restart. The replay judges at exact times
(the service's poller reads every 30 s). Usage:

    .venv/bin/python benchmarks/idle_reclaim.py [--seeds 42-44] [--idle 0.7,0.8,0.9] [--json out.json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from classes import POLICY, TEAM, _seeds, class_of, qos_of  # noqa: E402

from nomad_gpu.domain.classes import WorkloadClass  # noqa: E402
from nomad_gpu.domain.cycle import Admit, CycleConfig, Wait, run_cycle  # noqa: E402
from nomad_gpu.domain.fragmentation import Demand  # noqa: E402
from nomad_gpu.domain.idle import DEFAULT_IDLE, judge  # noqa: E402
from nomad_gpu.domain.ids import EntryId, NodeId  # noqa: E402
from nomad_gpu.domain.kinds.whole import WholeGpus  # noqa: E402
from nomad_gpu.domain.ledger import Ledger  # noqa: E402
from nomad_gpu.domain.reclaimfit import beneficiary  # noqa: E402
from nomad_gpu.domain.requests import AllocAsk, JobRequest  # noqa: E402
from nomad_gpu.sim.replay import sample_nodes  # noqa: E402
from nomad_gpu.sim.trace import NODES_CSV, PODS_CSV, TracePod, load_trace  # noqa: E402

POLICIES = ("none", "fixed", "queue-aware")
AFTER_S = 1800.0
GRACE_S = 5.0
CYCLE_S = 10.0
"""A cycle runs at most this often (simulated seconds): the replay's cost is its cycles, and waits here are
minutes to hours, so a change waits at most 10 s for its cycle (the service's cycle runs at once)."""
SESSION = "interactive"


@dataclass
class Attempt:
    """One run of a session (its first, or a restart after a stop)."""

    entry: EntryId
    index: int
    pod: TracePod
    rng: random.Random
    started: float = 0.0
    ends: float = 0.0
    idle_since: float | None = None
    version: int = 0
    stopped: bool = False
    idle_s: float = 0.0


@dataclass
class Run:
    policy: str
    idle_share: float
    seed: int
    gpus: int = 0
    waits: dict[str, list[float]] = field(default_factory=dict)
    never: dict[str, int] = field(default_factory=dict)
    idle_gpu_s: float = 0.0
    idle_while_waiting_gpu_s: float = 0.0
    """Session GPUs held idle while some job waited in the queue: what a waiting job could have had."""
    stopped: int = 0
    stopped_active_in_window: int = 0
    stopped_nobody_waiting: int = 0
    sessions: int = 0
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        def pct(v: list[float], q: float) -> float | None:
            return round(float(np.percentile(v, q)), 1) if v else None

        return {"policy": self.policy, "idle_share": self.idle_share, "seed": self.seed, "gpus": self.gpus,
                "sessions": self.sessions, "idle_gpu_hours": round(self.idle_gpu_s / 3600, 2),
                "idle_gpu_hours_while_waiting": round(self.idle_while_waiting_gpu_s / 3600, 2),
                "sessions_stopped": self.stopped, "stopped_active_in_window": self.stopped_active_in_window,
                "stopped_nobody_waiting": self.stopped_nobody_waiting,
                "waits": {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95)}
                          for k, v in sorted(self.waits.items())},
                "never_started": self.never, "wall_s": round(self.wall_s, 1)}


def replay(policy: str, idle_share: float, seed: int, speedup: float, fraction: float, active_min: float,
           trace_name: str = "default") -> Run:
    started_wall = time.perf_counter()
    trace = load_trace(NODES_CSV, PODS_CSV[trace_name])
    qos = qos_of(PODS_CSV[trace_name])
    inventory = sample_nodes(trace, fraction, seed)
    ledger = Ledger(inventory)
    config = CycleConfig(policy=POLICY)
    rule = DEFAULT_IDLE[WorkloadClass.INTERACTIVE]
    assert rule is not None
    run = Run(policy, idle_share, seed, gpus=sum(len(n.gpus) for n in inventory))
    active_s = active_min * 60.0
    idle_s_mean = active_s * idle_share / (1.0 - idle_share)

    def label(pod: TracePod) -> str:
        if qos.get(pod.name) == "BE" and pod.num_gpu == 1 and 0 < pod.gpu_milli < 1000:
            return SESSION
        cls = class_of(pod, qos.get(pod.name, ""))
        return cls.value if cls is not None else "cpu"

    pods = [p for p in trace.pods if p.runtime_s is not None]
    events: list[tuple[float, int, str, Any]] = []
    seq = 0

    def push(at: float, kind: str, payload: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, payload))

    for i, pod in enumerate(pods):
        push(pod.creation_time / speedup, "arrive", (EntryId(f"t{i}"), pod, None))
    queue: dict[EntryId, tuple[float, JobRequest, str, Any]] = {}
    live: dict[EntryId, Attempt] = {}
    recent: deque[JobRequest] = deque(maxlen=2000)
    demand, since_refresh = Demand(()), 0
    holds: dict[EntryId, frozenset[NodeId]] = {}
    order: list[EntryId] = []
    promised: dict[EntryId, EntryId] = {}  # waiting entry -> the session stopped for it, until its GPU is free
    draining: set[EntryId] = set()
    due: set[EntryId] = set()

    def go_idle(a: Attempt, now: float) -> None:
        a.idle_since = now
        a.version += 1
        length = a.rng.expovariate(1.0 / idle_s_mean)
        push(min(now + length, a.ends), "toggle", (a, a.version))
        if now + AFTER_S < min(now + length, a.ends):
            push(now + AFTER_S, "due", (a, a.version))

    def go_active(a: Attempt, now: float) -> None:
        if a.idle_since is not None:
            a.idle_s += now - a.idle_since
        a.idle_since = None
        a.version += 1
        due.discard(a.entry)
        push(min(now + a.rng.expovariate(1.0 / active_s), a.ends), "toggle", (a, a.version))

    def stop(a: Attempt, now: float, who: EntryId | None) -> None:
        run.stopped += 1
        if a.idle_since is None or now - a.idle_since < AFTER_S - 1e-6:
            run.stopped_active_in_window += 1
        if not queue:
            run.stopped_nobody_waiting += 1
        a.idle_s += now - (a.idle_since or now) + GRACE_S  # it holds the GPU, idle, through its grace
        run.idle_gpu_s += a.idle_s
        a.stopped, a.version = True, a.version + 1
        live.pop(a.entry, None)
        due.discard(a.entry)
        draining.add(a.entry)
        if who is not None:
            promised[who] = a.entry
        push(now + GRACE_S, "release", a.entry)
        back = now + a.rng.expovariate(1.0 / idle_s_mean)  # its user returns at the next active period
        if back < a.ends:  # else the session would have ended before its user came back
            push(back, "arrive", (EntryId(f"{a.entry.split('.')[0]}.{a.index + 1}"), a.pod, (a, a.ends - back)))

    def try_reclaim(now: float) -> None:
        if policy == "none" or not due:
            return
        waiting = [queue[e][1] for e in order if e in queue and e not in promised]
        for entry in sorted(due, key=lambda e: (live[e].idle_since or now, e)):
            a = live[entry]
            verdict = judge(rule, a.idle_since, now)
            if verdict is None or not verdict.due:
                continue
            if policy == "fixed":
                stop(a, now, None)
                continue
            who = beneficiary(ledger, [entry], waiting, policy=POLICY)
            if who is not None:
                stop(a, now, who)
                waiting = [w for w in waiting if w.entry != who]

    pending, scheduled, last_cycle = False, False, -CYCLE_S
    last_t = 0.0
    while events:
        now = events[0][0]
        if queue:  # idle session GPUs (and those in their stop's grace) while a job waits
            idle_now = sum(1 for a in live.values() if a.idle_since is not None) + len(draining)
            run.idle_while_waiting_gpu_s += idle_now * (now - last_t)
        last_t = now
        changed = judge_now = False  # the verdicts change only with a new due session or a cycle's new queue
        while events and events[0][0] <= now:
            _, _, kind, payload = heapq.heappop(events)
            if kind == "arrive":
                entry, pod, restart = payload
                if restart is not None:
                    left = restart[1]
                    cls = SESSION + " (restart)"
                else:
                    cls = label(pod)
                    left = pod.runtime_s or 0.0
                gpu = WholeGpus(1, pod.models) if cls.startswith(SESSION) else pod.gpu
                job = JobRequest(entry, TEAM, (AllocAsk("task", 0, pod.cpu_milli, pod.memory_mib, gpu),),
                                 submitted_at=now)
                queue[entry] = (now, job, cls, (pod, left, restart))
                recent.append(job)
                since_refresh += 1
                changed = True
            elif kind == "end":
                a = payload
                if not a.stopped:
                    if a.idle_since is not None:
                        a.idle_s += now - a.idle_since
                    run.idle_gpu_s += a.idle_s
                    live.pop(a.entry, None)
                    due.discard(a.entry)
                    ledger.release(a.entry)
                    changed = True
            elif kind in ("plain-end", "release"):  # a task's end, or a stopped session's grace over
                ledger.release(payload)
                draining.discard(payload)
                changed = True
            elif kind == "toggle":
                a, version = payload
                if a.stopped or version != a.version or now >= a.ends:
                    continue
                (go_active if a.idle_since is not None else go_idle)(a, now)
            elif kind == "cycle":
                scheduled = False  # the cycle runs below
            elif kind == "due":
                a, version = payload
                if not a.stopped and version == a.version:
                    due.add(a.entry)
                    judge_now = True
        promised = {w: v for w, v in promised.items() if v in draining and w in queue}
        if since_refresh >= 250 or not demand.shapes:
            demand, since_refresh = Demand.from_jobs(recent), 0
        pending = (pending or changed) and bool(queue)
        if pending and now < last_cycle + CYCLE_S:
            if not scheduled:
                push(last_cycle + CYCLE_S, "cycle", None)
                scheduled = True
        elif pending:
            pending, last_cycle = False, now
            got = run_cycle(ledger, [q[1] for q in queue.values()], now=now, config=config, holds=holds,
                            demand=demand)
            holds = dict(got.holds)
            order = [d.entry for d in got.decisions if isinstance(d, Wait)]
            judge_now = True
            for d in got.decisions:
                if not isinstance(d, Admit):
                    continue
                at, job, cls, (pod, left, restart) = queue.pop(d.entry)
                run.waits.setdefault(cls, []).append(now - at)
                if not cls.startswith(SESSION):
                    push(now + left, "plain-end", d.entry)
                    continue
                index = 0 if restart is None else restart[0].index + 1
                rng = random.Random(f"{seed}-{idle_share}-{d.entry.split('.')[0]}-{index}")  # paired across policies
                a = Attempt(d.entry, index, pod, rng, started=now, ends=now + left)
                run.sessions += restart is None
                live[d.entry] = a
                push(a.ends, "end", a)
                go_active(a, now)
        if judge_now:
            try_reclaim(now)
    for _, _, cls, _ in queue.values():
        run.never[cls] = run.never.get(cls, 0) + 1
    run.wall_s = time.perf_counter() - started_wall
    return run


def _one(args: tuple[str, float, int, float, float, float]) -> dict[str, Any]:
    return replay(*args).to_json()


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per idle share and policy: the figures summed (or pooled) over the seeds, and the issue's goals."""
    out: dict[str, Any] = {}
    for share in sorted({r["idle_share"] for r in runs}):
        rows: dict[str, Any] = {}
        for policy in POLICIES:
            mine = [r for r in runs if r["idle_share"] == share and r["policy"] == policy]
            if not mine:
                continue
            waits: dict[str, list[float]] = {}
            for r in mine:
                for cls, w in r["waits"].items():
                    waits.setdefault(cls, []).extend([w["p95"]] if w["p95"] is not None else [])
            rows[policy] = {
                "idle_gpu_hours": round(sum(r["idle_gpu_hours"] for r in mine), 1),
                "idle_gpu_hours_while_waiting": round(sum(r["idle_gpu_hours_while_waiting"] for r in mine), 1),
                "sessions_stopped": sum(r["sessions_stopped"] for r in mine),
                "stopped_active_in_window": sum(r["stopped_active_in_window"] for r in mine),
                "stopped_nobody_waiting": sum(r["stopped_nobody_waiting"] for r in mine),
                "p50_wait_s": _mean_of(mine, "p50"), "p95_wait_s": _mean_of(mine, "p95"),
                "never_started": _sum_never(mine)}
        if {"none", "fixed", "queue-aware"} <= rows.keys():
            none, fixed, qa = rows["none"], rows["fixed"], rows["queue-aware"]
            back_fixed = none["idle_gpu_hours"] - fixed["idle_gpu_hours"]
            back_qa = none["idle_gpu_hours"] - qa["idle_gpu_hours"]
            waited_fixed = none["idle_gpu_hours_while_waiting"] - fixed["idle_gpu_hours_while_waiting"]
            waited_qa = none["idle_gpu_hours_while_waiting"] - qa["idle_gpu_hours_while_waiting"]
            others = [c for c in none["p95_wait_s"] if not c.startswith(SESSION)]
            rows["goals"] = {
                "returned_gpu_hours_fixed": round(back_fixed, 1), "returned_gpu_hours_queue_aware": round(back_qa, 1),
                "returned_share_of_fixed": round(back_qa / back_fixed, 3) if back_fixed > 0 else None,
                "returned_while_waiting_fixed": round(waited_fixed, 1),
                "returned_while_waiting_queue_aware": round(waited_qa, 1),
                "returned_while_waiting_share_of_fixed": round(waited_qa / waited_fixed, 3) if waited_fixed > 0
                else None,
                "stopped_share_of_fixed": round(qa["sessions_stopped"] / fixed["sessions_stopped"], 3)
                if fixed["sessions_stopped"] else None,
                "p95_cut_vs_none": {c: _cut(none["p95_wait_s"].get(c), qa["p95_wait_s"].get(c)) for c in others},
                "p95_cut_vs_none_fixed": {c: _cut(none["p95_wait_s"].get(c), fixed["p95_wait_s"].get(c))
                                          for c in others}}
        out[f"{share:g}"] = rows
    return out


def _mean_of(runs: list[dict[str, Any]], q: str) -> dict[str, float | None]:
    """Per class, the mean over the seeds of each seed's percentile."""
    classes = sorted({c for r in runs for c in r["waits"]})
    out: dict[str, float | None] = {}
    for c in classes:
        vals = [r["waits"][c][q] for r in runs if c in r["waits"] and r["waits"][c][q] is not None]
        out[c] = round(float(np.mean(vals)), 1) if vals else None
    return out


def _sum_never(runs: list[dict[str, Any]]) -> dict[str, int]:
    classes = {c for r in runs for c in r["never_started"]}
    return {c: sum(r["never_started"].get(c, 0) for r in runs) for c in sorted(classes)}


def _cut(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before <= 0:
        return None
    return round(1.0 - after / before, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--idle", default="0.7,0.8,0.9", help="idle shares of the sessions")
    parser.add_argument("--speedup", type=float, default=2000.0)
    parser.add_argument("--node-fraction", type=float, default=0.2)
    parser.add_argument("--active-min", type=float, default=15.0, help="mean active period, minutes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    jobs = [(policy, float(share), seed, args.speedup, args.node_fraction, args.active_min)
            for share in args.idle.split(",") for seed in _seeds(args.seeds) for policy in POLICIES]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(_one, jobs))
    summary = summarise(runs)
    doc = {"args": {k: str(v) for k, v in vars(args).items()}, "wall_s": round(time.perf_counter() - started, 1),
           "summary": summary, "runs": runs}
    text = json.dumps(doc, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
