"""Wiring: store + Nomad client + actuator + scheduler + watcher + HTTP API, started in order.

Start-up order matters (DESIGN 3.5): the watcher's first resync reconciles the ledger from Nomad
before the cycle loop admits anything.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from urllib.parse import urlparse

import uvicorn

from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.watcher import Watcher
from nomad_gpu.service.actuator import Actuator
from nomad_gpu.service.api import create_app
from nomad_gpu.service.metrics import Metrics
from nomad_gpu.service.scheduler import SchedulerService
from nomad_gpu.service.settings import ServiceSettings
from nomad_gpu.store.sqlite import SqliteStore

logger = logging.getLogger(__name__)


class ServiceRuntime:
    """The whole service in one process; `start()` returns once the API is listening."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.store = SqliteStore(settings.db_path)
        self.client = NomadClient(settings.nomad)
        self.actuator = Actuator(self.client, settings.templates_dir)
        self.metrics = Metrics()
        self.scheduler = SchedulerService(self.store, self.actuator, settings.scheduling, self.metrics)
        self.watcher = Watcher(self.client, self.scheduler, settings.scheduling.sharing)
        self._server: uvicorn.Server | None = None
        self._server_thread: threading.Thread | None = None
        self.address = settings.listen

    def start(self, *, wait_ready_s: float = 0.0) -> str:
        self.scheduler.start()
        self.watcher.start()
        self.address = self._serve_api()
        if wait_ready_s > 0:
            self.scheduler.ready.wait(wait_ready_s)
        return self.address

    def _serve_api(self) -> str:
        url = urlparse(self.settings.listen)
        host, port = url.hostname or "127.0.0.1", (url.port if url.port is not None else 4690)
        # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only then, and without
        # it every keep-alive response waits ~40 ms on Nagle + delayed ACK
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        port = sock.getsockname()[1]
        config = uvicorn.Config(create_app(self.scheduler, self.settings.token), log_level="warning",
                                access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._server_thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                               name="api", daemon=True)
        self._server_thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.watcher.stop()
        self.scheduler.stop()
        if self._server is not None:
            self._server.should_exit = True
        if self._server_thread is not None:
            self._server_thread.join(timeout=5)
        self.store.close()
