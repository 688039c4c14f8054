"""Scale end to end: a burst of one-GPU jobs and one large sweep through `nomad-gpu serve` against a
dev cluster of many 8-GPU nodes, each in its own process, judged from the outside.

What a user meets is not the engine alone but submit, admit, render, `/v1/jobs/parse`, register and
the event stream; this measures all of it together. Per repeat, a fresh cluster file, dev cluster,
service and database:

1. `--jobs` one-GPU jobs are posted one by one (submissions/s), then one sweep of `--trials` trials
   in one request (`max_parallel` unset);
2. the run waits until nothing is queued or admitted; the dev cluster's audit then gives every
   allocation's `registered_at` and `started_at` (registers/s, time from the first submit to the last
   job running, and from the sweep's post to its last trial running);
3. CPU seconds (user + system, psutil) of the service and of the dev cluster over steps 1-2, per job,
   and the service's peak RSS;
4. the service is stopped (`--restart-signal`, SIGTERM by default) with everything running and started
   again on the same database: the time to `/v1/status` saying ready;
5. with `--complete`, the run then waits for every job to complete (each runs `--run-s` wall seconds)
   and adds that phase's CPU to a "submit to complete" figure per job;
6. with `--against-bare`, a fresh dev cluster of the same fleet then takes the same number of jobs from
   `benchmarks/bare_loop.py` (render the service's own HCL of one of these jobs with jinja2, parse,
   register with python-nomad, nothing else), and the run reports that loop's CPU per job and the
   service's as a multiple of it (`service_vs_bare`). Use `--trials 0` for a like-for-like ratio: the
   bare loop registers one-GPU jobs only.

`--clients N` posts the jobs from N threads at once, as a team's scripts would.

Prints JSON: every repeat, and the median of each figure over `--repeat`. The machine's load average
is recorded before and after, since the figures mean little without it.

Quick run (the defaults): 100 nodes, 300 jobs, a sweep of 100 trials, one repeat. The full run of the
scale issue:

    python benchmarks/scale.py --nodes 1000 --jobs 3000 --trials 1000 --repeat 3

The service against the bare loop (the CPU-per-job issue's measurement):

    python benchmarks/scale.py --nodes 1000 --jobs 3000 --trials 0 --clients 8 --against-bare --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import requests

from nomad_gpu.service.demo import free_port, start_dev_cluster

_JOB_ID = re.compile(r"^ngpu-(?:[0-9a-f]{6}-)?(?P<entry>q\d{6,})(?:-\d+)?$")
JOB = ("name: burst-{i}\nteam: t{team}\ntask: {{image: busybox}}\nresources: {{cpu: 100, memory: 128}}\n"
       "gpu: {{count: 1}}\ndev: {{duration_s: {run_s}}}\n")
SWEEP = ("kind: sweep\nname: hpo\nteam: t0\ntask: {{image: busybox}}\nresources: {{cpu: 100, memory: 128}}\n"
         "gpu: {{count: 1}}\nsweep: {{mode: grid, parameters: {{trial: [{values}]}}}}\n"
         "dev: {{duration_s: {run_s}}}\n")


def entry_of(job_id: str) -> str:
    match = _JOB_ID.match(job_id)
    return match["entry"] if match else ""


def cluster_file(path: Path, nodes: int) -> None:
    """`nodes` nodes of 8 x A100 80GB, the fleet of the scale issue."""
    lines = ["name: scale", "nodes:"]
    for i in range(nodes):
        lines += [f"  - name: gpu-{i:05d}", "    cpu_shares: 128000", "    memory_mb: 1048576",
                  "    gpus: [{model: NVIDIA A100-SXM4-80GB, count: 8, memory_mib: 81920}]"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


class Service:
    """`nomad-gpu serve` as its own process, on one database and port across restarts."""

    def __init__(self, workdir: Path, nomad_url: str, tick_s: float, min_cycle_interval_s: float | None = None) -> None:
        self.workdir, self.nomad_url = workdir, nomad_url
        self.addr = f"http://127.0.0.1:{free_port()}"
        config = f"tick_s: {tick_s}\n"
        if min_cycle_interval_s is not None:
            config += f"min_cycle_interval_s: {min_cycle_interval_s}\n"
        (workdir / "config.yaml").write_text(config, encoding="utf-8")
        self.http = requests.Session()
        self.http.headers.update({"Content-Type": "application/yaml", "X-Nomad-Gpu-Client": "bench"})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Starts the process; the seconds until `/v1/status` says ready."""
        log = open(self.workdir / "service.log", "ab")  # noqa: SIM115 (kept open for the child's life)
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nomad_gpu.cli.main", "serve", "--db", str(self.workdir / "q.db"),
             "--listen", self.addr, "--config", str(self.workdir / "config.yaml")],
            env={**os.environ, "NOMAD_ADDR": self.nomad_url}, stdout=log, stderr=log)
        while time.monotonic() - started < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited ({self.proc.returncode}); see {self.workdir}/service.log")
            try:
                if self.http.get(f"{self.addr}/v1/status", timeout=2).json().get("ready"):
                    return time.monotonic() - started
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.02)
        raise RuntimeError("the service was not ready within 120 s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def pending(self, states: str) -> bool:
        """Whether any entry is in one of `states` (cheap: one row at most)."""
        body = self.http.get(f"{self.addr}/v1/jobs", params={"state": states, "limit": "1"}, timeout=30).json()
        return bool(body["entries"])


def wait_until(check: Any, timeout_s: float, poll_s: float = 0.25) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"not done within {timeout_s:.0f} s")
        time.sleep(poll_s)
    return time.monotonic() - started


class PeakRss:
    """The largest RSS seen on the processes sampled so far."""

    def __init__(self) -> None:
        self.mib = 0.0

    def sample(self, proc: psutil.Process) -> None:
        self.mib = max(self.mib, proc.memory_info().rss / 2**20)


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="nomad-gpu-scale-"))
    cluster = workdir / "cluster.yaml"
    cluster_file(cluster, args.nodes)
    nomad, nomad_url = start_dev_cluster(cluster, 1.0)
    service = Service(workdir, nomad_url, args.tick_s, args.min_cycle_interval_s)
    try:
        first_ready_s = service.start()
        assert service.proc is not None
        svc, dev = psutil.Process(service.proc.pid), psutil.Process(nomad.pid)
        svc_rss, dev_rss = PeakRss(), PeakRss()
        svc_cpu0, dev_cpu0 = cpu_s(svc), cpu_s(dev)
        svc_sys0 = svc.cpu_times().system
        profiler = start_profile(args.profile, svc.pid, workdir, args.profile_on_cpu)
        cycles0 = service.http.get(f"{service.addr}/v1/status", timeout=30).json()["cycles"]
        session = service.http
        first_submit = time.time()

        def post(i: int) -> None:
            body = JOB.format(i=i, team=i % 5, run_s=args.run_s).encode()
            session.post(f"{service.addr}/v1/jobs", data=body, timeout=30).raise_for_status()
            if i % 200 == 0:
                svc_rss.sample(svc)

        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(post, range(args.jobs)))
        submit_s = time.time() - first_submit
        sweep_posted, trial_ids = time.time(), set()
        if args.trials:
            body = SWEEP.format(values=", ".join(str(v) for v in range(args.trials)), run_s=args.run_s).encode()
            reply = session.post(f"{service.addr}/v1/jobs", data=body, timeout=120)
            reply.raise_for_status()
            trial_ids = {e["id"] for e in reply.json()["entries"]}
        sweep_submit_s = time.time() - sweep_posted

        def all_running() -> bool:
            svc_rss.sample(svc)
            dev_rss.sample(dev)
            return not service.pending("queued,admitted")

        wait_until(all_running, args.timeout_s)
        svc_cpu, dev_cpu = cpu_s(svc) - svc_cpu0, cpu_s(dev) - dev_cpu0
        stop_profile(profiler)
        svc_sys = svc.cpu_times().system - svc_sys0
        cycles = service.http.get(f"{service.addr}/v1/status", timeout=30).json()["cycles"] - cycles0
        audit = requests.get(f"{nomad_url}/_dev/audit", timeout=120).json()
        total = args.jobs + args.trials
        allocs = [a for a in audit["allocations"] if a["job_id"].startswith("ngpu-")]
        trial_allocs = [a for a in allocs if entry_of(a["job_id"]) in trial_ids]
        registers = sorted(a["registered_at"] for a in allocs)
        starts = sorted(a["started_at"] for a in allocs if a.get("started_at") is not None)
        trial_starts = sorted(a["started_at"] for a in trial_allocs if a.get("started_at") is not None)
        span = registers[-1] - registers[0] if len(registers) > 1 else 0.0
        run: dict[str, Any] = {
            "allocations": len(allocs), "jobs": args.jobs, "trials": args.trials,
            "submissions_per_s": round(args.jobs / submit_s, 1) if submit_s else None,
            "sweep_submit_s": round(sweep_submit_s, 2),
            "registers_per_s": round((len(registers) - 1) / span, 1) if span else None,
            "first_submit_to_all_running_s": round(starts[-1] - first_submit, 2) if starts else None,
            "sweep_post_to_all_trials_running_s":
                round(trial_starts[-1] - sweep_posted, 2) if trial_starts else None,
            "service_cpu_ms_per_job": round(1000 * svc_cpu / total, 2),
            "devcluster_cpu_ms_per_job": round(1000 * dev_cpu / total, 2),
            "service_system_cpu_ms_per_job": round(1000 * svc_sys / total, 2),
            "service_cycles": cycles,
            "service_peak_rss_mib": round(svc_rss.mib, 1), "devcluster_peak_rss_mib": round(dev_rss.mib, 1),
            "first_ready_s": round(first_ready_s, 2),
        }
        if args.against_bare:
            run.update(against_bare(args, nomad_url, allocs, workdir))
            run["service_vs_bare"] = round(run["service_cpu_ms_per_job"] / run["bare_cpu_ms_per_job"], 2)
        service.stop(getattr(signal, args.restart_signal))
        run["restart_to_ready_s"] = round(service.start(), 2)
        if args.complete:
            svc = psutil.Process(service.proc.pid)
            svc_cpu1, dev_cpu1 = cpu_s(svc), cpu_s(dev)
            wait_until(lambda: not service.pending("queued,admitted,running"), args.timeout_s + args.run_s, 1.0)
            run["service_cpu_ms_per_job_to_complete"] = round(
                run["service_cpu_ms_per_job"] + 1000 * (cpu_s(svc) - svc_cpu1) / total, 2)
            run["devcluster_cpu_ms_per_job_to_complete"] = round(
                run["devcluster_cpu_ms_per_job"] + 1000 * (cpu_s(dev) - dev_cpu1) / total, 2)
        return run
    finally:
        service.stop()
        nomad.terminate()
        nomad.wait(30)


def start_profile(out: Path | None, pid: int, workdir: Path, on_cpu: bool = False) -> subprocess.Popen[bytes] | None:
    """With `--profile`, py-spy (installed apart: it is no dependency of the project) samples every thread
    of the service from the first post until all are running, into collapsed stacks (`--profile` FILE).

    By default it samples the thread holding the GIL; py-spy names the GIL's last holder even while no
    thread holds it, so a thread that gave the GIL up to wait on a lock is charged for the wait (samples
    on a `with lock:` line). `on_cpu` samples instead every thread the OS has on a CPU, the CPU itself."""
    if out is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    mode = [] if on_cpu else ["--gil"]
    proc = subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                             "--nonblocking", *mode, "-o", str(out)], stdout=open(workdir / "py-spy.log", "ab"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)
    time.sleep(1.0)  # attached before the first post
    return proc


def stop_profile(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def bare_template(nomad_url: str, allocs: list[dict[str, Any]]) -> str:
    """One of the run's one-GPU jobs as the service registered it (Nomad's stored HCL source), with its job
    ID, node ID and device ID made jinja2 variables: the same HCL for the bare loop to render."""
    alloc = next(a for a in allocs if len(a["device_ids"]) == 1)
    reply = requests.get(f"{nomad_url}/v1/job/{alloc['job_id']}/submission",
                         params={"version": "0", "namespace": alloc["namespace"]}, timeout=30)
    reply.raise_for_status()
    source = str(reply.json()["Source"])
    if "{{" in source or "{%" in source or "{#" in source:
        raise RuntimeError("the registered HCL holds jinja2 syntax; it cannot be used as the bare loop's template")
    for value, name in ((alloc["job_id"], "job_id"), (alloc["node_id"], "node_id"),
                        (alloc["device_ids"][0], "device_id")):
        if value not in source:
            raise RuntimeError(f"the registered HCL does not name its {name} {value!r}")
        source = source.replace(value, "{{ " + name + " }}")
    return source


def gpu_pins(nomad_url: str) -> list[list[str]]:
    """[node ID, GPU ID] for every GPU of the dev cluster, node by node."""
    pins = []
    for stub in requests.get(f"{nomad_url}/v1/nodes", timeout=60).json():
        node = requests.get(f"{nomad_url}/v1/node/{stub['ID']}", timeout=30).json()
        for device in (node.get("NodeResources") or {}).get("Devices") or []:
            pins += [[node["ID"], inst["ID"]] for inst in device.get("Instances") or []]
    return pins


def against_bare(args: argparse.Namespace, service_nomad_url: str, allocs: list[dict[str, Any]],
                 workdir: Path) -> dict[str, Any]:
    """The bare loop's figures for as many jobs as the service took, on a fresh dev cluster of the same fleet."""
    (workdir / "bare.hcl.j2").write_text(bare_template(service_nomad_url, allocs), encoding="utf-8")
    nomad, nomad_url = start_dev_cluster(workdir / "cluster.yaml", 1.0)
    try:
        (workdir / "pins.json").write_text(json.dumps(gpu_pins(nomad_url)), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("bare_loop.py")), "--nomad", nomad_url,
             "--template", str(workdir / "bare.hcl.j2"), "--pins", str(workdir / "pins.json"),
             "--jobs", str(args.jobs)], capture_output=True, text=True, timeout=args.timeout_s, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the bare loop failed: {done.stderr.strip()[-2000:]}")
        bare = json.loads(done.stdout.strip().splitlines()[-1])
        audit = requests.get(f"{nomad_url}/_dev/audit", timeout=120).json()
        placed = [a for a in audit["allocations"] if a["job_id"].startswith("bare-")]
        if len(placed) != args.jobs:
            raise RuntimeError(f"the bare loop's {args.jobs} jobs made {len(placed)} allocations")
        return {"bare_cpu_ms_per_job": bare["cpu_ms_per_job"], "bare_registers_per_s": bare["registers_per_s"]}
    finally:
        nomad.terminate()
        nomad.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100, help="8 x A100 nodes in the dev cluster")
    parser.add_argument("--jobs", type=int, default=300, help="one-GPU jobs posted one by one")
    parser.add_argument("--trials", type=int, default=100, help="trials of the one sweep (0: none)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--run-s", type=float, default=600.0, help="each job's run time in wall seconds")
    parser.add_argument("--tick-s", type=float, default=1.0, help="the service's scheduling tick")
    parser.add_argument("--min-cycle-interval-s", type=float, default=None,
                        help="the service's min_cycle_interval_s (default: the service's own)")
    parser.add_argument("--restart-signal", choices=["SIGTERM", "SIGKILL"], default="SIGTERM")
    parser.add_argument("--complete", action="store_true", help="also wait for every job to complete")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--clients", type=int, default=1, help="threads posting the jobs at once")
    parser.add_argument("--against-bare", action="store_true",
                        help="also run benchmarks/bare_loop.py on the same fleet and print the ratio")
    parser.add_argument("--profile", type=Path, default=None,
                        help="sample the service with py-spy (pip install py-spy) into this file: collapsed stacks")
    parser.add_argument("--profile-on-cpu", action="store_true",
                        help="with --profile, sample the threads on a CPU instead of the GIL's holder")
    args = parser.parse_args()
    if args.jobs + args.trials > args.nodes * 8:
        print(f"{args.jobs + args.trials} jobs do not fit on {args.nodes * 8} GPUs at once", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    runs = []
    for _ in range(args.repeat):
        runs.append(one_run(args))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    medians = {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]
               if all(isinstance(r.get(key), (int, float)) for r in runs)}
    report = {"nodes": args.nodes, "gpus": args.nodes * 8, "cpu_count": os.cpu_count(),
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "median": medians, "runs": runs}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
