"""MIG layouts on the openb trace: static layouts, instant create-in-free-space, and queue-driven re-layouts.

Every GPU of a sampled part of the openb cluster is an H100 80GB in MIG mode. A fractional pod asks the
smallest profile whose compute slices cover ceil(gpu_milli x 7 / 1000) (5 or 6 round up to 7g.80gb); a
whole-GPU pod asks 7g.80gb; a pod of n GPUs asks n x 7g.80gb on one node. Pods arrive at their trace
creation times divided by SPEEDUP (default 1000, so that the sample fills), in order, until the
GPU-equivalents arrived reach 130 % of the sample's capacity, and run for their trace runtimes. Each
event, the waiting pods are tried in arrival order (later ones may pass a blocked one: backfill); a pod
takes the smallest idle instance with at least its compute slices.

- static: the layout never changes (all 1g.10gb; balanced 3g+2g+1g+1g; all 7g.80gb);
- instant: an instance of the exact profile is made at a valid free placement when a pod starts and is
  gone when it ends, at no cost (what the DRA driver's DynamicMIG does): the reference;
- ours: every GPU starts as 7 x 1g.10gb; pods the idle instances cannot serve go to the planner
  (domain/migplanner.py, the service's own) in arrival order; a re-layout takes DELAY seconds during
  which the GPU's idle part is unusable, at most one per node at a time, a GPU at most once per 60 s.

Reported per sample (node fraction, seed): wait p50/p95 (s) of all pods, a pod never placed counting as
waiting until the replay's end (when nothing runs and nothing more can start); the pods never placed, and
the p95 of the placed ones alone, apart; allocation % (compute slices in use over all)
when the 130 % point arrives, re-layouts per GPU-hour.

    python benchmarks/mig.py --seeds 42-44 --node-fraction 0.05 --json docs/mig-results.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nomad_gpu.domain.ids import NodeId
from nomad_gpu.domain.miglayout import MigGeometry, Placed, arrange, geometry_for
from nomad_gpu.domain.migplanner import MigAsk, MigGpu, MigInstance, PlanSettings, plan
from nomad_gpu.sim.trace import NODES_CSV, TracePod, load_trace

TRACE = NODES_CSV.parent
"""The bundled openb trace (the FGD paper's); `--trace DIR` reads another copy of its two CSV files."""
_G = geometry_for("NVIDIA H100 80GB HBM3", [("3g.40gb", 4)])
assert _G is not None
H100: MigGeometry = _G
PROFILE_BY_SLICES = {1: "1g.10gb", 2: "2g.20gb", 3: "3g.40gb", 4: "4g.40gb", 5: "7g.80gb", 6: "7g.80gb", 7: "7g.80gb"}
STATIC = {"static-1g": ["1g.10gb"] * 7, "static-balanced": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
          "static-7g": ["7g.80gb"]}


@dataclass
class Pod:
    index: int
    at: float
    runtime: float
    profile: str
    count: int
    compute: int  # slices per instance


@dataclass
class Gpu:
    node: int
    uuid: str
    instances: dict[Placed, int | None] = field(default_factory=dict)  # placement -> pod index or None
    busy_until: float = 0.0  # re-laying: its idle part is unusable until then
    pending: tuple[Placed, ...] | None = None
    last_relayout: float = -1e18


def to_pod(i: int, p: TracePod) -> Pod | None:
    if p.num_gpu == 0 or p.gpu_milli == 0 or p.runtime_s is None:
        return None
    if p.num_gpu == 1 and p.gpu_milli < 1000:
        slices = math.ceil(p.gpu_milli * 7 / 1000)
        profile = PROFILE_BY_SLICES[slices]
        return Pod(i, p.creation_time, p.runtime_s, profile, 1, H100.shape(profile).compute)  # type: ignore[union-attr]
    return Pod(i, p.creation_time, p.runtime_s, "7g.80gb", p.num_gpu, 7)


def run(policy: str, pods: list[Pod], gpus_per_node: list[int], delay: float, speedup: float = 1.0) -> dict[str, Any]:
    gpus: list[Gpu] = []
    for n, count in enumerate(gpus_per_node):
        for k in range(count):
            g = Gpu(n, f"GPU-{n}-{k}")
            base = STATIC.get(policy, ["1g.10gb"] * 7 if policy.startswith("ours") else [])
            for placed in arrange(H100, base) or ():
                g.instances[placed] = None
            gpus.append(g)
    by_node: dict[int, list[Gpu]] = {}
    for g in gpus:
        by_node.setdefault(g.node, []).append(g)
    total_slices = 7 * len(gpus)
    capacity = float(len(gpus))
    arrivals, cut, arrived = [], None, 0.0
    for pod in sorted(pods, key=lambda p: (p.at, p.index)):
        pod = Pod(pod.index, pod.at / speedup, pod.runtime, pod.profile, pod.count, pod.compute)
        arrivals.append(pod)
        arrived += pod.count * pod.compute / 7
        if arrived >= 1.3 * capacity:
            cut = pod.at
            break
    events: list[tuple[float, int, int, Any]] = []  # (time, kind 0=end 1=relayout-done 2=arrive, seq, payload)
    seq = 0
    for pod in arrivals:
        heapq.heappush(events, (pod.at, 2, seq, pod))
        seq += 1
    waiting: list[Pod] = []
    waits: list[float] = []
    used = 0
    relayouts = 0
    alloc_at_cut: float | None = None
    start = arrivals[0].at if arrivals else 0.0
    now = start
    holders: dict[int, list[tuple[Gpu, Placed]]] = {}
    seen_failed: set[tuple[str, int]] = set()
    while events:
        now, kind, _, payload = heapq.heappop(events)
        if kind == 0:
            for g, placed in holders.pop(payload.index):
                if policy == "instant":
                    del g.instances[placed]
                else:
                    g.instances[placed] = None
            used -= payload.count * payload.compute
        elif kind == 1:
            g = payload
            g.instances = {p: o for p, o in g.instances.items() if o is not None}
            for p in g.pending or ():
                g.instances.setdefault(p, None)
            g.pending = None
        else:
            waiting.append(payload)
        if events and events[0][0] == now:
            continue  # settle every event of this instant first
        still: list[Pod] = []
        failed: set[tuple[str, int]] = set()  # a shape that found no room finds none later in this pass
        for pod in waiting:
            shape = (pod.profile, pod.count)
            got = None if shape in failed else place(policy, pod, by_node, now)
            if got is None:
                failed.add(shape)
                still.append(pod)
                continue
            holders[pod.index] = got
            used += pod.count * pod.compute
            waits.append(now - pod.at)
            heapq.heappush(events, (now + pod.runtime, 0, seq, pod))
            seq += 1
        waiting = still
        if policy.startswith("ours") and waiting and (kind != 2 or len(failed) != len(seen_failed)):
            seen_failed = set(failed)
            firsts = list({(p.profile, p.count): p for p in reversed(waiting[:64])}.values())[::-1]
            for g, layout in relayout(gpus, firsts[:8], now):
                relayouts += 1
                g.busy_until, g.pending, g.last_relayout = now + delay, layout, now
                heapq.heappush(events, (now + delay, 1, seq, g))
                seq += 1
        if cut is not None and alloc_at_cut is None and now >= cut:
            alloc_at_cut = 100.0 * used / total_slices
    hours = max(now - start, 1.0) / 3600.0
    placed_waits = sorted(waits)
    waits = sorted(waits + [now - pod.at for pod in waiting])  # never placed: waited until the replay's end
    return {"policy": policy, "gpus": len(gpus), "pods": len(arrivals), "placed": len(placed_waits),
            "never_placed": len(waiting), "wait_p50_s": pct(waits, 50), "wait_p95_s": pct(waits, 95),
            "placed_wait_p95_s": pct(placed_waits, 95),
            "alloc_pct_at_130": round(alloc_at_cut or 0.0, 2),
            "relayouts": relayouts, "hours": round(hours, 1),
            "relayouts_per_gpu_hour": float(f"{relayouts / (len(gpus) * hours):.3g}")}


def place(policy: str, pod: Pod, by_node: dict[int, list[Gpu]], now: float) -> list[tuple[Gpu, Placed]] | None:
    for node_gpus in by_node.values():
        got: list[tuple[Gpu, Placed]] = []
        for g in node_gpus:
            if len(got) == pod.count:
                break
            if policy == "instant":
                placed = arrange(H100, [pod.profile], tuple(g.instances))
                if placed is not None:
                    (p,) = placed
                    got.append((g, p))
                continue
            if g.pending is not None and g.busy_until > now:
                continue  # its idle part is being re-laid
            fits = sorted((H100.shape(p.profile).compute, p.start, p) for p, o in g.instances.items()  # type: ignore[union-attr]
                          if o is None and H100.shape(p.profile).compute >= pod.compute)  # type: ignore[union-attr]
            if fits:
                got.append((g, fits[0][2]))
        if len(got) == pod.count:
            for g, p in got:
                g.instances[p] = pod.index
            return got
    return None


def relayout(gpus: list[Gpu], waiting: list[Pod], now: float) -> list[tuple[Gpu, tuple[Placed, ...]]]:
    view, index = [], {}
    busy_nodes = {NodeId(str(g.node)) for g in gpus if g.pending is not None}
    for g in gpus:
        if g.pending is not None or all(o is not None for o in g.instances.values()) and len(g.instances) > 0:
            continue  # re-laying, or nothing idle and no free slice: it cannot help
        index[g.uuid] = g
        view.append(MigGpu(NodeId(str(g.node)), g.uuid, "NVIDIA H100 80GB HBM3", H100,
                           tuple(MigInstance(f"{g.uuid}@{p.start}", p, o is not None) for p, o in g.instances.items()),
                           last_relayout_at=g.last_relayout))
    asks = [MigAsk(str(p.index), p.profile, p.count) for p in waiting]
    out = []
    for r in plan(view, asks, now=now, settings=PlanSettings(cool_down_s=60.0), busy_nodes=busy_nodes):
        out.append((index[r.gpu], r.after))
    return out


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    k = min(len(values) - 1, max(0, math.ceil(q / 100 * len(values)) - 1))
    return round(values[k], 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--node-fraction", type=float, default=0.05)
    ap.add_argument("--delays", default="5,60")
    ap.add_argument("--speedup", type=float, default=1000.0, help="arrival times divided by this (runtimes kept)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    trace = load_trace(args.trace / "openb_node_list_gpu_node.csv", args.trace / "openb_pod_list_default.csv")
    pods = [p for i, tp in enumerate(trace.pods) if (p := to_pod(i, tp)) is not None]
    policies = [*STATIC, "instant", *(f"ours-{d}s" for d in args.delays.split(","))]
    rows = []
    for seed in seeds:
        nodes = sorted((n for n in trace.nodes if n.gpus), key=lambda n: n.name)
        keep = random.Random(seed).sample(nodes, max(1, round(len(nodes) * args.node_fraction)))
        for policy in policies:
            delay = float(policy.removeprefix("ours-").removesuffix("s")) if policy.startswith("ours") else 0.0
            started = time.perf_counter()
            row = {"seed": seed, **run(policy, pods, [n.gpus for n in keep], delay, args.speedup),
                   "cpu_s": round(time.perf_counter() - started, 2)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{'seed':>4} {'policy':16} {'p50 s':>9} {'p95 s':>10} {'never':>6} {'alloc%':>7} {'relay/GPU-h':>11}")
    for r in rows:
        print(f"{r['seed']:>4} {r['policy']:16} {r['wait_p50_s']!s:>9} {r['wait_p95_s']!s:>10} {r['never_placed']:>6} "
              f"{r['alloc_pct_at_130']:>7} {r['relayouts_per_gpu_hour']:>11}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
