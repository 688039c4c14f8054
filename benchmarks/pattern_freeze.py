"""How long one hostile `gpu_memory` takes to refuse, and how long other requests wait (issue 31, item 2).

Starts the API in a child process (the service's own HTTP server, as `serve` runs it, with no Nomad
behind it), posts `gpu_memory: "1" + N spaces + "!"` for each N, and, while that answer is due, asks
`/v1/status` again and again on other connections. Prints the seconds to the 400 and the longest
`/v1/status` seen meanwhile.

    python benchmarks/pattern_freeze.py [--spaces 16000 48000 96000]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import requests

SERVE = textwrap.dedent("""
    import time
    from nomad_gpu.service.http.api import create_app
    from nomad_gpu.service.http.listen import ApiServer, plan_listen
    from nomad_gpu.service.loops.scheduler import SchedulerService
    from nomad_gpu.service.config.settings import SchedulingSettings
    from nomad_gpu.store import SqliteStore

    class NoNomad:  # nothing is admitted (no node is known), so nothing reaches Nomad
        pass

    service = SchedulerService(SqliteStore(), NoNomad(), SchedulingSettings())
    server = ApiServer(create_app(service), plan_listen("http://127.0.0.1:0", token_required=False))
    server.bind()
    print(server.serve(), flush=True)
    time.sleep(3600)
""")


def post(port: int, spaces: int) -> tuple[float, str]:
    body = json.dumps({"name": "freeze", "class": "training", "task": {"image": "busybox"},
                       "gpu_memory": "1" + " " * spaces + "!"}).encode()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    return time.monotonic() - started, got.split(b"\r\n", 1)[0].decode()


def status_s(port: int) -> float:
    started = time.monotonic()
    requests.get(f"http://127.0.0.1:{port}/v1/status", timeout=600).raise_for_status()
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--spaces", type=int, nargs="+", default=[16_000, 48_000, 96_000])
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", SERVE], cwd=root, text=True, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().strip().rsplit(":", 1)[1])
        status_s(port)
        print(f"/v1/status alone: {status_s(port):.3f} s")
        for spaces in args.spaces:
            result: list[tuple[float, str]] = []
            hostile = threading.Thread(target=lambda n=spaces, out=result: out.append(post(port, n)))
            hostile.start()
            waits = []
            while hostile.is_alive():
                waits.append(status_s(port))
                time.sleep(0.1)
            hostile.join()
            took, status = result[0]
            print(f"{spaces:>7} spaces: refused in {took:.3f} s ({status}); "
                  f"/v1/status meanwhile: {len(waits)} asked, the longest {max(waits):.3f} s")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
