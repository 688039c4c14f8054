"""The service's CPU per job split by what each step guarantees, every step measured alone on one thread.

A sampling profile of `nomad-gpu serve` under a burst charges time to whichever thread py-spy takes for
the GIL's holder, and a machine shared with other work moves every figure; here each step of a job's way
runs alone, in this process, on the real store (SQLite on disk, fsynced where the service fsyncs) and the
real Nomad client against a dev cluster of `--nodes` 8-GPU nodes, and its CPU (user + system of this
process) is divided by the jobs it handled:

1. decode and validate the spec, bind it to the caller (`check_request`);
2. the submission's checks and its durable insert, acknowledged before the reply (`SchedulerService.submit`:
   the fleet and class checks, the quota and limits in the insert's transaction, the entry tracked);
3. the cycle: the engine's decision and the fsynced admission, in batches of `--batch` jobs (the scale run
   decides about three jobs per cycle);
4. the register: render the HCL and its Job JSON, `POST /v1/jobs` through python-nomad, the state move
   that records it (`Registrar._register`), of which rendering alone is also given;
5. following the job to running: each allocation event's JSON decoded and applied (`on_alloc`: the state
   moves that let a restart resume), `--events` per job (the scale run's stream carries about five);
6. the HTTP edge, measured on a `nomad-gpu serve` process from outside: a submission refused at its first
   step (an empty body) passes the server, the guards and the worker thread hop, and nothing else.

    python benchmarks/cpu_budget.py --nodes 300 --jobs 1000

Prints JSON: each step's CPU in ms per job, their sum, and the bare loop's CPU per job (`bare_loop.py` on a
fresh dev cluster of the same fleet, as `scale.py --against-bare` runs it) with the sum as a multiple of
it. Compare the sum with `scale.py --against-bare`'s `service_cpu_ms_per_job` on the same machine: the
difference is what running the steps on many threads at once costs (locks, hand-offs, the GIL).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import JOB, Service, against_bare, cluster_file  # noqa: E402  (the same fleet, jobs and bare loop)

from nomad_gpu.nomad.client import NomadClient  # noqa: E402
from nomad_gpu.nomad.connection import NomadSettings  # noqa: E402
from nomad_gpu.nomad.decode import decode_alloc, decode_node  # noqa: E402
from nomad_gpu.service.admission.access import Caller  # noqa: E402
from nomad_gpu.service.admission.submission import Request, check_request  # noqa: E402
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings  # noqa: E402
from nomad_gpu.service.demo import start_dev_cluster  # noqa: E402
from nomad_gpu.service.life.actuator import Actuator  # noqa: E402
from nomad_gpu.service.loops.scheduler import SchedulerService  # noqa: E402
from nomad_gpu.store import EntryState, SqliteStore  # noqa: E402


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class Timed:
    """CPU seconds spent inside `run`, by step."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def run(self, step: str, fn: Callable[[], Any]) -> Any:
        started = cpu_s()
        try:
            return fn()
        finally:
            self.spent[step] = self.spent.get(step, 0.0) + cpu_s() - started


class Queue:
    """The actuator's executor, run by hand: each register is timed alone."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> None:
        self.calls.append((fn, args))


class TimedRender(Actuator):
    """The real actuator, its rendering also counted apart."""

    timed: Timed

    def render_with_job(self, *args: Any, **kwargs: Any) -> Any:
        return self.timed.run("render (inside register)", lambda: super(TimedRender, self).render_with_job(
            *args, **kwargs))


def in_process(args: argparse.Namespace, nomad_url: str, workdir: Path, timed: Timed) -> None:
    client = NomadClient(NomadSettings(address=nomad_url))
    nodes = [decode_node(n) for n in client.nodes()]
    store = SqliteStore(str(workdir / "budget.db"))
    queue = Queue()
    actuator = TimedRender(client)
    actuator.timed = timed
    actuator.max_run_duration()  # the agents' versions, read once a minute: not a per-job cost
    svc = SchedulerService(store, actuator, SchedulingSettings(tick_s=3600.0), executor=queue)
    svc.on_resync(nodes, [])
    rules, caller = AccessSettings(), Caller()
    for first in range(0, args.jobs, args.batch):
        for i in range(first, min(args.jobs, first + args.batch)):
            body = JOB.format(i=i, team=i % 5, run_s=600).encode()
            checked = timed.run("1 decode, validate, bind", lambda b=body: check_request(
                Request(b, "application/yaml", rules, caller)))
            timed.run("2 checks and durable insert", lambda c=checked: svc.submit(c.data, spec=c.spec))
        timed.run("3 cycle: decide and admit", svc.run_cycle)
    registers, queue.calls = queue.calls, []
    for fn, call_args in registers:
        timed.run("4 register (render, POST /v1/jobs, state move)", lambda f=fn, a=call_args: f(*a))
    unregistered = [e for e in store.list() if e.registered_at is None]
    if unregistered:
        raise RuntimeError(f"{len(unregistered)} entries were not registered: {unregistered[0].state}")
    deadline = time.monotonic() + 120
    while True:
        allocs = [a for a in client.allocations() if str(a.get("JobID", "")).startswith("ngpu-")]
        if len(allocs) == args.jobs and all(a.get("ClientStatus") == "running" for a in allocs):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the dev cluster did not start every job within 120 s")
        time.sleep(0.5)
    for raw in allocs:  # as the stream carries them: pending updates, then running
        for k in range(args.events):
            event = {**raw, "ClientStatus": "running" if k == args.events - 1 else "pending",
                     "ModifyIndex": int(raw.get("ModifyIndex") or 0) + k}
            frame = json.dumps({"Index": event["ModifyIndex"], "Events": [
                {"Topic": "Allocation", "Type": "AllocationUpdated", "Key": raw["ID"], "Namespace": "default",
                 "Index": event["ModifyIndex"], "Payload": {"Allocation": event}}]})
            timed.run("5 events to running (decode, apply, state moves)",
                      lambda f=frame: svc.on_alloc(decode_alloc(json.loads(f)["Events"][0]["Payload"]["Allocation"])))
    running = sum(1 for e in store.list() if e.state is EntryState.RUNNING)
    if running != args.jobs:
        raise RuntimeError(f"{running} of {args.jobs} entries running after the events")
    svc.stop()
    store.close()


def http_edge(args: argparse.Namespace, nomad_url: str, workdir: Path, timed: Timed) -> None:
    service = Service(workdir, nomad_url, 1.0)
    service.start()
    assert service.proc is not None
    proc = psutil.Process(service.proc.pid)
    try:
        session = service.http
        session.post(f"{service.addr}/v1/jobs", data=b"", timeout=30)
        before = sum(proc.cpu_times()[:2])
        for _ in range(args.jobs):
            reply = session.post(f"{service.addr}/v1/jobs", data=b"", timeout=30)
            if reply.status_code != 400:
                raise RuntimeError(f"an empty submission answered {reply.status_code}")
        timed.spent["6 HTTP edge: server, guards, thread hop (serve process)"] = sum(proc.cpu_times()[:2]) - before
    finally:
        service.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=3, help="jobs submitted between two cycles")
    parser.add_argument("--events", type=int, default=5, help="allocation events per job")
    args = parser.parse_args()
    if args.jobs > args.nodes * 8:
        print(f"{args.jobs} jobs do not fit on {args.nodes * 8} GPUs", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="nomad-gpu-budget-"))
    cluster_file(workdir / "cluster.yaml", args.nodes)
    load_before = os.getloadavg()
    timed = Timed()
    nomad, nomad_url = start_dev_cluster(workdir / "cluster.yaml", 1.0)
    try:
        in_process(args, nomad_url, workdir, timed)
        audit = requests.get(f"{nomad_url}/_dev/audit", timeout=120).json()
        allocs = [a for a in audit["allocations"] if a["job_id"].startswith("ngpu-")]
        bare = against_bare(argparse.Namespace(jobs=args.jobs, timeout_s=600.0), nomad_url, allocs, workdir)
    finally:
        nomad.terminate()
        nomad.wait(30)
    nomad, nomad_url = start_dev_cluster(workdir / "cluster.yaml", 1.0)
    try:
        http_edge(args, nomad_url, workdir, timed)
    finally:
        nomad.terminate()
        nomad.wait(30)
    per_job = {step: round(1000 * s / args.jobs, 3) for step, s in sorted(timed.spent.items())}
    whole = sum(v for k, v in per_job.items() if "inside" not in k)
    print(json.dumps({"nodes": args.nodes, "jobs": args.jobs, "batch": args.batch, "events": args.events,
                      "cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                      "load_average_after": [round(x, 2) for x in os.getloadavg()],
                      "ms_per_job": per_job, "sum_ms_per_job": round(whole, 3),
                      "bare_cpu_ms_per_job": bare["bare_cpu_ms_per_job"],
                      "sum_vs_bare": round(whole / bare["bare_cpu_ms_per_job"], 2)}, indent=2))
    return 0


if __name__ == "__main__":
    requests.packages.urllib3.disable_warnings()  # type: ignore[attr-defined]
    sys.exit(main())
