"""Embedding API: run the dev cluster inside a test, a benchmark, or `nomad-gpu dev-cluster`.

`DevCluster` wires the parts together (state, broker, timer thread, HTTP app) and runs uvicorn on a
background thread, so a test can start a Nomad-compatible endpoint in well under a second, point
the real client code at `dc.url`, inject faults with plain method calls, and read the audit.
uvicorn is started with `log_config=None`: a library never configures logging.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

from . import devicehealth, evals, gc, hcl, nodeops, partitions, queries
from .acl import Acl, AclToken
from .aclpolicy import load_acl_file, tokens_of
from .api import build_app
from .config import ClusterSpec, load_cluster_file, parse_cluster
from .election import RPC_HOLD_S
from .events import EventBroker
from .hijack import HijackingH11Protocol
from .runner import TimerHeap
from .state import ClusterState
from .version import DEFAULT_NOMAD_VERSION, NomadVersion

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0


class DevCluster:
    """An in-process, loopback, Nomad-API-compatible cluster.

    `cluster` is a ClusterSpec, a mapping in the cluster-file format, or a path to a YAML file.
    `speed` compresses task time (a 60 s task runs 2 s at speed 30); `event_buffer` is the number of
    raft indexes the event stream keeps (Nomad: 100); `heartbeat_s` is the stream heartbeat (30).
    `nomad_version` is the Nomad release it plays (version.py): from 1.11.2 on, the event stream is a
    hijacked, close-delimited body; 1.11.1 and earlier chunk it. `acl_tokens` turns ACLs on (acl.py).
    `rpc_hold_s` is how long a request waits for a leader during an election (Nomad: 5 s, election.py).
    """

    def __init__(self, cluster: ClusterSpec | Mapping[str, Any] | str | Path, *, speed: float = 1.0,
                 event_buffer: int = 100, heartbeat_s: float = 30.0,
                 clock: Callable[[], float] = time.time,
                 nomad_version: str | NomadVersion = DEFAULT_NOMAD_VERSION,
                 acl_tokens: Iterable[AclToken] = (), rpc_hold_s: float = RPC_HOLD_S) -> None:
        self.nomad_version = (nomad_version if isinstance(nomad_version, NomadVersion)
                              else NomadVersion.parse(nomad_version))
        if isinstance(cluster, str | Path):
            cluster = load_cluster_file(cluster)
        elif not isinstance(cluster, ClusterSpec):
            cluster = parse_cluster(cluster)
        self.cluster = cluster
        if cluster.acl is not None:  # the cluster file's own policies and tokens (aclpolicy.py)
            acl_tokens = [*tokens_of(cluster.acl, self.nomad_version, source=f"cluster {cluster.name}: acl"),
                          *acl_tokens]
        self.broker = EventBroker(event_buffer, clock)
        self.timers = TimerHeap(clock)
        self.state = ClusterState(cluster, self.broker, self.timers, speed=speed, clock=clock)
        self.app = build_app(self.state, self.broker, heartbeat_s=heartbeat_s, nomad_version=self.nomad_version,
                             acl=Acl(acl_tokens), rpc_hold_s=rpc_hold_s)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._url: str | None = None
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 = any free port); returns the base URL once connections are accepted."""
        if self._server is not None or self._stopped:
            raise RuntimeError("a dev cluster starts once; build a new DevCluster to start again")
        hcl.warm_up()
        self.timers.start()
        # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only then, and without
        # it every keep-alive response waits ~40 ms on Nagle + delayed ACK
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        # the h11 protocol with hijacking, for the 1.11.2+ event stream (hijack.py); no `server` header,
        # which Nomad does not send; no X-Forwarded-For rewriting, which Nomad does not do either
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1, ws="none", http=HijackingH11Protocol,
                                server_header=False, proxy_headers=False)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="devcluster-http",
                                  daemon=True)
        self._server, self._thread, self._socket = server, thread, sock
        thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("dev cluster HTTP server failed to start")
            time.sleep(0.002)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self._url = f"http://{shown}:{bound_port}"
        logger.info("dev cluster %r serving the Nomad %s API on %s", self.cluster.name, self.nomad_version,
                    self._url)
        return self._url

    def stop(self) -> None:
        """End every event stream, stop the HTTP server and the timer thread (idempotent)."""
        self._stopped = True
        self.broker.drop_all()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(_START_TIMEOUT_S)
            if self._thread.is_alive():
                logger.warning("dev cluster HTTP thread did not stop in time")
        if self._socket is not None:
            self._socket.close()
        self.timers.stop()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> DevCluster:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("dev cluster not started")
        return self._url

    # -- inspection and fault injection ------------------------------------------------------------

    def node_ids(self) -> dict[str, str]:
        """Node name -> node ID, in cluster-file order."""
        with self.state.lock:
            return {node.name: node.id for node in self.state.nodes.values()}

    def audit(self) -> dict[str, Any]:
        return queries.audit(self.state)

    def fail_evaluations(self, count: int, mode: str = "plan") -> None:
        """The next `count` register evaluations fail (evals.py `fail`): "plan", the scheduler gives up
        after its plan attempts (a `max-plan-attempts` blocked eval follows), or "delivery", the broker's
        delivery limit (a `failed-follow-up` eval runs 1-6 min later)."""
        if mode not in evals.FAIL_MODES:
            raise ValueError(f"mode must be one of {evals.FAIL_MODES}")
        with self.state.lock:
            self.state.failing_evals, self.state.failing_mode = count, mode

    def set_leader(self, present: bool) -> None:
        """Lose the servers' leader until it is regained (an election without an end; election.py)."""
        if present:
            self.state.election.end()
        else:
            self.state.election.begin()

    def election(self, seconds: float | None = None) -> None:
        """No leader for `seconds` of the cluster's clock (None: until `end_election`): writes and
        default reads answer 500 "No cluster leader" after a 5 s hold, nothing is committed (election.py)."""
        self.state.election.begin(seconds)

    def end_election(self) -> None:
        self.state.election.end()

    def drop_streams(self) -> int:
        """Close every open event stream; returns how many there were."""
        return self.broker.drop_all()

    def collect_garbage(self, threshold_s: float = 0.0) -> dict[str, Any]:
        """Run Nomad's job garbage collection now, synchronously (`PUT /v1/system/gc` enqueues the
        same pass with a 1 ms threshold; here the default 0 also takes what ended this millisecond);
        returns {"jobs": [{"namespace", "job_id"}...], "evals": n, "allocs": n}."""
        return gc.collect(self.state, threshold_s)

    def drain(self, node: str, deadline_s: float = nodeops.DEFAULT_DRAIN_DEADLINE_S) -> None:
        """Drain with a deadline (seconds of the cluster's clock): service allocations migrate now,
        batch ones are force stopped at the deadline (replaced only on 1.10.x and earlier)."""
        self.state.set_drain(node, True, deadline_s)

    def stop_alloc(self, alloc_id: str) -> dict[str, Any]:
        """`POST /v1/allocation/:id/stop`: stop and migrate (a replacement is placed, batch too)."""
        return self.state.stop_alloc(alloc_id)

    def unreachable(self, seconds: float) -> int:
        """Nomad unreachable for `seconds` of the cluster's clock: every `/v1/` request is reset
        without a reply and open event streams are cut (returns how many). Refused requests are
        counted per second in the audit's `faults`."""
        self.state.faults.unreachable(seconds)
        return self.broker.drop_all()

    def reachable(self) -> None:
        """End an outage early."""
        self.state.faults.reachable()

    def lose_replies(self, count: int, mode: str = "reset", delay_s: float = 0.0) -> None:
        """The next `count` registers are applied, then their reply is lost: the connection is
        reset (`reset`) or closed (`close`) without a reply, or the reply waits `delay_s` (`delay`)."""
        self.state.faults.lose_replies(count, mode, delay_s)

    def faults(self) -> dict[str, Any]:
        """Fault counters: requests, refused (total, per second, max per second), outages, lost replies."""
        return self.state.faults.snapshot()

    def node_down(self, node: str) -> None:
        """Node status `down`: its live allocations become `lost` (and are replaced)."""
        self.state.set_node_status(node, "down")

    def node_up(self, node: str) -> None:
        self.state.set_node_status(node, "ready")

    def partition(self, node: str) -> None:
        """The node stops heartbeating; its tasks run on (partitions.py)."""
        partitions.partition(self.state, node)

    def heal(self, node: str) -> None:
        partitions.heal(self.state, node)

    def node_drain(self, node: str) -> None:
        """Drain on, eligibility ineligible; running allocations keep running."""
        self.state.set_drain(node, True)

    def node_undrain(self, node: str) -> None:
        self.state.set_drain(node, False)

    def set_eligibility(self, node: str, eligible: bool) -> None:
        self.state.set_eligibility(node, eligible)

    def device_unhealthy(self, node: str, instance_id: str, description: str = devicehealth.DEFAULT_UNHEALTHY) -> None:
        """The node's plugin reports one device instance unhealthy: nothing new lands on it, what runs
        on it goes on (devicehealth.py)."""
        devicehealth.set_health(self.state, node, instance_id, False, description)

    def device_healthy(self, node: str, instance_id: str) -> None:
        devicehealth.set_health(self.state, node, instance_id, True)


def serve_forever(cluster_path: str | Path, host: str = "127.0.0.1", port: int = 4646, speed: float = 1.0,
                  event_buffer: int = 100, heartbeat_s: float = 30.0,
                  on_ready: Callable[[str], None] | None = None,
                  nomad_version: str | NomadVersion = DEFAULT_NOMAD_VERSION,
                  acl_file: str | Path | None = None) -> None:
    """Run a dev cluster from a cluster file until Ctrl-C (for `nomad-gpu dev-cluster`).

    The address is logged at INFO; `on_ready(url)` lets a CLI print it as well.
    """
    version = nomad_version if isinstance(nomad_version, NomadVersion) else NomadVersion.parse(nomad_version)
    tokens = load_acl_file(acl_file, version) if acl_file is not None else ()  # `--acl-file`: ACLs on
    cluster = DevCluster(cluster_path, speed=speed, event_buffer=event_buffer, heartbeat_s=heartbeat_s,
                         nomad_version=version, acl_tokens=tokens)
    url = cluster.start(host, port)
    logger.info("dev cluster %r (Nomad %s, %d nodes, speed x%g) listening on %s; export NOMAD_ADDR=%s; "
                "Ctrl-C stops it", cluster.cluster.name, cluster.nomad_version, len(cluster.cluster.nodes), speed,
                url, url)
    if on_ready is not None:
        on_ready(url)
    stop = threading.Event()
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        logger.info("stopping the dev cluster")
    finally:
        cluster.stop()
