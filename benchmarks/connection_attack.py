"""Connections that never read their answers, against the API (issue 31, item 3).

Starts the service's API in a subprocess (no Nomad: nothing is admitted), opens ``--connections`` sockets
that each send ``--pipelined`` ``GET /ui/app.js`` at once and never read a byte, then sends ``--requests``
legitimate ``GET /v1/status``, one a second, and prints each one's status and time, the file descriptors the
service holds (idle, at most, and at each request) and when they were back to idle. (The attacker cannot
tell: a socket the service closed behind answers it never read looks open to it.) ``--legit token``: the
service has an admin token and the requests carry it; ``--legit client``: the service has no token and the
requests carry ``X-Nomad-Gpu-Client``; ``--legit plain``: no token, no header (a page load). ``--reconnect``
opens a socket again as soon as the server closes one, so the attack never lets up; ``--wait-released`` waits
after the requests until the service's descriptors are back to idle (2 minutes at most).

    python benchmarks/connection_attack.py [--cap 100] [--connections 1000] [--pipelined 200]
        [--requests 8] [--legit token|client|plain] [--reconnect] [--wait-released]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "benchmark-admin-token-0123456789"
APP_JS = b"GET /ui/app.js HTTP/1.1\r\nHost: localhost\r\n\r\n"
HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)

SERVE = textwrap.dedent("""
    import sys, time
    from nomad_gpu.service.http.api import create_app
    from nomad_gpu.service.config.limits import HttpLimits
    from nomad_gpu.service.http.listen import ApiServer, plan_listen
    from nomad_gpu.service.loops.scheduler import SchedulerService
    from nomad_gpu.service.config.settings import SchedulingSettings
    from nomad_gpu.store import SqliteStore

    class NoNomad:
        def __getattr__(self, name):
            raise AssertionError("nothing reaches Nomad here")

    cap, token = int(sys.argv[1]), sys.argv[2] or None
    service = SchedulerService(SqliteStore(), NoNomad(), SchedulingSettings())
    server = ApiServer(create_app(service, token=token), plan_listen("http://127.0.0.1:0", token_required=False),
                       limits=HttpLimits(max_connections=cap), tokens=(token,) if token else ())
    print(server.serve(), flush=True)
    time.sleep(3600)
""")


class Attack:
    """The attacking sockets, in one thread; counts what the server did to them."""

    def __init__(self, port: int, connections: int, pipelined: int, reconnect: bool) -> None:
        self.port, self.connections, self.burst, self.reconnect = port, connections, APP_JS * pipelined, reconnect
        self.opened = self.refused = self.closed_by_server = 0
        self.began = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.setblocking(False)
            s.send(self.burst)
        except OSError:
            self.refused += 1
            return None
        self.opened += 1
        return s

    def run(self) -> None:
        socks: dict[int, socket.socket] = {}
        poller = select.poll()
        started = 0
        while not self.stop.is_set():
            while len(socks) < self.connections and (self.reconnect or started < self.connections):
                s = self.open()
                started += 1
                if s is None:
                    break
                socks[s.fileno()] = s
                poller.register(s, HANGUP)
            for fd, _ in poller.poll(50):
                poller.unregister(fd)
                socks.pop(fd).close()
                self.closed_by_server += 1
        for s in socks.values():
            s.close()


def descriptors(pid: int) -> int:
    """File descriptors the service holds (its sockets; a socket it closed with unread data still queued is
    the kernel's to finish, not the service's)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def sample(pid: int, into: list[tuple[float, int]], stop: threading.Event) -> None:
    while not stop.is_set():
        into.append((time.monotonic(), descriptors(pid)))
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=1000, help="api.http.max_connections")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--pipelined", type=int, default=200)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--legit", choices=["token", "client", "plain"], default="token")
    parser.add_argument("--reconnect", action="store_true")
    parser.add_argument("--wait-released", action="store_true",
                        help="after the requests, wait (2 min at most) until the service holds no attack socket")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.connections + 256)), hard))
    token = TOKEN if args.legit == "token" else ""
    headers = {"token": {"Authorization": f"Bearer {TOKEN}"}, "client": {"X-Nomad-Gpu-Client": "cli"}, "plain": {}}
    server = subprocess.Popen([sys.executable, "-c", SERVE, str(args.cap), token], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        address = server.stdout.readline().strip()
        idle = descriptors(server.pid)
        attack = Attack(int(address.rsplit(":", 1)[1]), args.connections, args.pipelined, args.reconnect)
        samples: list[tuple[float, int]] = []
        sampler = threading.Thread(target=sample, args=(server.pid, samples, attack.stop), daemon=True)
        sampler.start()
        attack.thread.start()
        while attack.opened + attack.refused < args.connections:
            time.sleep(0.1)
        time.sleep(1.0)
        results = []
        for _ in range(args.requests):
            start = time.monotonic()
            try:
                status: int | str = requests.get(f"{address}/v1/status", headers=headers[args.legit],
                                                 timeout=30).status_code
            except requests.RequestException as exc:
                status = f"{type(exc).__name__}: {exc}"[:120]
            results.append((status, time.monotonic() - start, descriptors(server.pid)))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
        while args.wait_released and descriptors(server.pid) > idle + 5 and time.monotonic() - attack.began < 120:
            time.sleep(0.1)
        attack.stop.set()
        attack.thread.join(10)
    finally:
        server.kill()
        server.wait()
    ok = [t for status, t, _ in results if status == 200]
    print(json.dumps({
        "cap": args.cap, "connections": args.connections, "pipelined": args.pipelined, "legit": args.legit,
        "reconnect": args.reconnect, "succeeded": f"{len(ok)} of {len(results)}",
        "statuses": [status for status, _, _ in results],
        "latency_s": {"median": round(statistics.median(ok), 3), "max": round(max(ok), 3)} if ok else None,
        "each_s": [round(t, 3) for _, t, _ in results],
        "service_descriptors": {"idle": idle, "at_each_request": [n for _, _, n in results]},
        "attack_opened": attack.opened, "attack_refused_at_connect": attack.refused,
        "attack_closed_by_server": attack.closed_by_server,
        "service_descriptors_most": max(n for _, n in samples),
        "back_to_idle_after_s": next((round(t - attack.began, 1) for t, n in reversed(samples) if n > idle + 5), None),
    }))


if __name__ == "__main__":
    main()
