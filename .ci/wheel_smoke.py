"""The user's first commands, run against an installed wheel from an empty directory (see .ci/wheel-check).

Run with the fresh virtualenv's python, from an empty working directory, with the source tree as the
only argument (for an example job spec: the spec is the user's file, not part of the package). Each
step has a timeout, prints its wall time, and fails with one line saying what was wrong.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent
STEPS: list[tuple[str, float]] = []


def fail(message: str) -> None:
    sys.exit(f"wheel check FAILED: {message}")


def run(step: str, args: list[str], timeout_s: float, env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        fail(f"{step}: no answer within {timeout_s:g} s")
    if done.returncode != 0:
        fail(f"{step}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    STEPS.append((step, time.monotonic() - started))
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_installed_from_the_wheel() -> None:
    import nomad_gpu
    from nomad_gpu import bundled

    where = Path(nomad_gpu.__file__).resolve()
    if Path(sys.prefix).resolve() not in where.parents:
        fail(f"nomad_gpu imported from {where}, not from the virtualenv {sys.prefix}")
    for found in (bundled.templates_dir(), bundled.clusters_dir()):
        if Path(sys.prefix).resolve() not in found.resolve().parents:
            fail(f"bundled files found at {found}, outside the installed package")
    if "batch.hcl.j2" not in {p.name for p in bundled.templates_dir().iterdir()}:
        fail("the wheel carries no batch.hcl.j2")
    if "seed-a800" not in bundled.bundled_clusters():
        fail("the wheel carries no seed-a800 cluster")


def check_render(source: Path) -> None:
    hcl = run("render", [str(BIN / "nomad-gpu"), "render", str(source / "jobspecs" / "train.yaml")], 60)
    if 'job "ngpu-preview-0"' not in hcl or "device " not in hcl:
        fail(f"render: unexpected output: {hcl[:300]!r}")


def check_example() -> None:
    """The dev banner's first step, from the empty directory: an example spec out of the wheel, rendered."""
    spec = run("example train", [str(BIN / "nomad-gpu"), "example", "train"], 30)
    Path("train.yaml").write_text(spec, encoding="utf-8")
    hcl = run("render the example", [str(BIN / "nomad-gpu"), "render", "train.yaml"], 60)
    Path("train.yaml").unlink()
    if 'job "ngpu-preview-0"' not in hcl:
        fail(f"render of the example: unexpected output: {hcl[:300]!r}")


def check_simulate() -> None:
    out = run("simulate packing (one seed)", [str(BIN / "nomad-gpu"), "simulate", "packing", "--seeds", "42",
                                              "--workers", "1", "--tune", "0.3", "--json"], 120)
    result = json.loads(out)
    if result.get("seeds") != [42] or not result.get("arrived_pct"):
        fail(f"simulate packing: unexpected result {out[:300]!r}")


def check_demo() -> None:
    out = run("demo (10 jobs)", [str(BIN / "nomad-gpu"), "demo", "--jobs", "10", "--duration", "30",
                                 "--speed", "30", "--json"], 150)
    report = json.loads(out)
    if report.get("jobs_completed") != 10 or report.get("double_bookings") != 0:
        fail(f"demo: {report}")


def check_dev_cluster() -> None:
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen([str(BIN / "nomad-gpu"), "dev-cluster", "--cluster", "seed-a800", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        nodes = None
        while time.monotonic() < deadline and nodes is None:
            if proc.poll() is not None:
                fail(f"dev-cluster exited {proc.returncode}: {(proc.stderr.read() if proc.stderr else '')[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/nodes", timeout=2) as resp:
                    nodes = json.load(resp)
            except OSError:
                time.sleep(0.2)
        if nodes is None:
            fail("dev-cluster: /v1/nodes did not answer within 60 s")
        if [n.get("Name") for n in nodes] != ["gpu-a800-1"]:
            fail(f"dev-cluster: unexpected nodes {nodes!r:.300}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("dev-cluster did not stop within 10 s of SIGTERM")
    STEPS.append(("dev-cluster (start, /v1/nodes, stop)", time.monotonic() - started))


def check_device_plugin() -> None:
    """The plugin's console script starts, shakes hands as go-plugin asks, and stops on SIGTERM."""
    from nomad_gpu.plugin.main import MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE

    started = time.monotonic()
    env = dict(os.environ, **{MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE, "PLUGIN_PROTOCOL_VERSIONS": "2",
                              "NOMAD_GPU_DEVICE_FAKE_NVML": "a800x8"})
    proc = subprocess.Popen([str(BIN / "nomad-gpu-device")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not (line.startswith("1|2|unix|") and line.rstrip().endswith("|grpc")):
            fail(f"nomad-gpu-device: no go-plugin handshake, got {line!r}; "
                 f"stderr: {(proc.stderr.read() if proc.stderr else '')[-1000:]}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    STEPS.append(("nomad-gpu-device handshake", time.monotonic() - started))


def main() -> None:
    source = Path(sys.argv[1]).resolve()
    if any(Path.cwd().iterdir()):
        fail(f"run from an empty directory, not {Path.cwd()}")
    check_installed_from_the_wheel()
    check_render(source)
    check_example()
    check_simulate()
    check_demo()
    check_dev_cluster()
    check_device_plugin()
    for step, seconds in STEPS:
        print(f"  {step:40} {seconds:6.1f} s")


if __name__ == "__main__":
    main()
