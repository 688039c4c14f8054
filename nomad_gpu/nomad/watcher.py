"""Follows Nomad's event stream and tells the service what changed, never missing or repeating.

- resumes from the last index seen (the index is inclusive, so frames are also deduplicated);
- handles each frame the moment its line arrives, whichever way Nomad frames the body (chunked up to
  1.11.1, a hijacked connection that ends only at close from 1.11.2: `command/agent/event_endpoint.go`);
- reconnects with capped exponential backoff when the stream breaks or the server closes it. From
  1.11.2 an error after the 200 (token expired, ACL denied) is a plain end of the body, so an end is
  no sign of health: the backoff resets only once a data frame arrived, never on a heartbeat or a
  clean end, and a stream that answers 200 and closes at once is retried ever more slowly; three such
  closes in a row (or a 403) are Nomad refusing the token: state `forbidden`, one ERROR line naming
  the capability, a retry a minute;
- a watchdog gives up on a connection that delivered no bytes at all (not even the `{}` heartbeat
  Nomad sends every 30 s) for two heartbeat periods: a half-open TCP connection or a stuck proxy
  would otherwise hold the watcher forever;
- after every (re)connect, re-lists nodes and allocations over REST and hands the full picture to
  the service to reconcile, because an index older than the server's buffer silently skips events
  (reference/nomad-api.md section 1);
- notices namespaces created after it subscribed: Nomad expands `namespace=*` once, when the stream
  subscribes, and never sends events of a namespace created later on that stream
  (`nomad/event_endpoint.go` `validateACL`, v2.0.5 and v1.10.5). Every `namespace_check_s`, on a frame
  or heartbeat, it lists the namespaces; a new one ends the stream and the watcher resubscribes at
  once, with a resync.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import requests

from nomad_gpu.domain.errors import InvalidInventory, Unavailable
from nomad_gpu.domain.inventory import Node
from nomad_gpu.nomad.backoff import Backoff
from nomad_gpu.nomad.client import NomadClient, NomadError, NomadForbidden
from nomad_gpu.nomad.decode import AllocInfo, SharingConfig, decode_alloc, decode_node
from nomad_gpu.nomad.evaldecode import EvalInfo, decode_eval
from nomad_gpu.nomad.fanin import FanIn

logger = logging.getLogger(__name__)

TOPICS = ("Allocation:*", "Node:*", "Job:*", "Evaluation:*")
HEARTBEAT_S = 30.0
NAMESPACE_CHECK_S = 10.0
"""How often the namespaces are listed while a stream subscribed to `*` is up (one small GET)."""
SILENT_ENDS_FORBIDDEN = 3
"""Streams in a row that close before their first heartbeat: Nomad 1.11.2+ refusing the token."""
FORBIDDEN_RETRY_S = 60.0
NODE_TYPES = frozenset({"NodeRegistration", "NodeStreamEvent", "NodeDrain", "NodeEligibility", "NodeEvent"})
ALLOC_TYPES = frozenset({"PlanResult", "AllocationUpdated", "AllocationUpdateDesiredStatus"})


class WatchHandler(Protocol):
    """What the service implements; called from the watcher's thread, one call at a time."""

    def on_resync(self, nodes: list[Node], allocs: list[AllocInfo]) -> None: ...
    def on_node(self, node: Node) -> None: ...
    def on_node_removed(self, node_id: str) -> None: ...
    def on_alloc(self, alloc: AllocInfo) -> None: ...
    def on_job_deregistered(self, job_id: str) -> None: ...
    def on_eval(self, evaluation: EvalInfo) -> None: ...


class Watcher:
    """Runs in its own thread; `stop()` ends it at the next frame, heartbeat or backoff.

    `heartbeat_s` is Nomad's stream heartbeat (30 s, `nomad/event_endpoint.go`); the watchdog fires
    after two of them without a byte.
    """

    def __init__(self, client: NomadClient, handler: WatchHandler, sharing: SharingConfig,
                 *, start_index: int = 0, heartbeat_s: float = HEARTBEAT_S,
                 sleep: Callable[[float], bool] | None = None, namespace_check_s: float = NAMESPACE_CHECK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if heartbeat_s <= 0:
            raise ValueError("heartbeat_s must be positive")
        self.client = client
        self.handler = handler
        self.sharing = sharing
        self.last_index = start_index
        self.silence_limit_s = 2 * heartbeat_s
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._sleep = sleep or self._wait
        self._unstored: str | None = None  # why the service could not store Nomad's state (a full disk)
        self._seen: deque[tuple[int, str, str, str]] = deque(maxlen=4096)
        self._seen_set: set[tuple[int, str, str, str]] = set()
        self.backoff = Backoff()
        self._warned: set[str] = set()
        self._failing: str | None = None
        """The last failure said, until Nomad answers again (each failure is said once, not per retry)."""
        self.reconnects = 0
        self.connected = threading.Event()
        self.synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._responses: list[requests.Response] = []  # the open streams (one per watched namespace)
        self._stream_index: dict[str, int] = {}
        self._floors: dict[str, int] = {}
        self.namespace_check_s = namespace_check_s
        self._clock = clock
        self._subscribed: frozenset[str] | None = None
        """The namespaces that existed before this stream subscribed to `*` (None: not tracked)."""
        self._namespaces_checked = 0.0
        self._resubscribe = False
        self.namespace_resubscribes = 0
        self.stream_state = "connecting"
        """connecting, following, or forbidden (Nomad refuses the token: see `_silent_end`)."""
        self.forbidden_since: float | None = None
        self.forbidden_retry_s = FORBIDDEN_RETRY_S
        self._silent_ends = 0

    # ---- life cycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="nomad-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        self._interrupt_all()  # unblocks a read that would otherwise wait for the next heartbeat
        if self._thread is not None:
            self._thread.join(timeout=5)

    def resync_soon(self) -> None:
        """Cut the wait before the next resync short (the service can store again what it could not)."""
        self._poke.set()

    def _wait(self, delay: float) -> bool:
        poked = self._poke.wait(delay)
        self._poke.clear()
        return poked

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.resync()
                if self._unstored is not None:
                    logger.warning("watching Nomad: the service takes in Nomad's state again")
                    self._unstored = None
                # after the resync, before subscribing: a namespace made between the two is in the list and in
                # the stream's expansion, and its jobs come after the resync's index, so the stream replays
                # them; listed after the resync, an outage costs one failed request per retry, not two
                self._track_namespaces()
                if self._failing is not None:
                    logger.warning("watching Nomad: it answers again")
                    self._failing = None
                heard = self._follow()
                if not self._stop.is_set() and not self._resubscribe:
                    if heard:
                        logger.info("event stream ended at index %d; reconnecting", self.last_index)
                    else:
                        self._silent_end()
            except NomadForbidden as exc:
                if self._stop.is_set():
                    break
                self._forbidden(str(exc))
            except NomadError as exc:
                if self._stop.is_set():
                    break
                if str(exc) != self._failing:  # one line per change: the back-off retries every few seconds
                    logger.warning("watching Nomad: %s; retrying", exc)
                    self._failing = str(exc)
            except Unavailable as exc:  # the service cannot store it now (a full disk): no bug, said once
                if str(exc) != self._unstored:
                    logger.warning("watching Nomad: the service cannot take in Nomad's state (%s); resyncing "
                                   "every few seconds, and at once when it can", exc)
                    self._unstored = str(exc)
            except Exception:  # a handler bug must not kill the watcher; it is logged loudly
                logger.exception("event handling failed; resyncing")
            self.connected.clear()
            if self._stop.is_set():
                break
            if self._resubscribe:  # not a failure: a new namespace to take in, at once
                self._resubscribe = False
                continue
            self.reconnects += 1
            delay = (self.forbidden_retry_s if self.stream_state == "forbidden"
                     else self.backoff.after_error() if self._failing or self._unstored else self.backoff.next())
            logger.debug("event stream: reconnect %d in %.2f s", self.reconnects, delay)
            self._sleep(delay)

    # ---- refusals ----------------------------------------------------------------------------
    def _silent_end(self) -> None:
        """The stream answered and closed before its first heartbeat. From 1.11.2 that is how Nomad refuses
        the token (`200 OK` is written before `Event.stream` checks the ACL: command/agent/event_endpoint.go
        `EventStream`, nomad/event_endpoint.go `validateNsOp`, v2.0.5); a few in a row are a refusal."""
        self._silent_ends += 1
        if self._silent_ends >= SILENT_ENDS_FORBIDDEN:
            self._forbidden(f"the event stream closed before its first heartbeat {self._silent_ends} times in a row")
        else:
            logger.info("event stream closed before its first heartbeat; reconnecting")

    def _forbidden(self, why: str) -> None:
        if self.stream_state != "forbidden":
            namespaces = self.client.settings.watch_namespace
            scope = "every namespace (namespace=*)" if namespaces == "*" else f"namespace(s) {namespaces}"
            logger.error("Nomad refuses the service's token (%s): it needs read-job in %s and node read "
                         "(docs/nomad-acl.md), or set the watched namespaces to those it may read; retrying "
                         "every %g s", why, scope, self.forbidden_retry_s)
        self.stream_state = "forbidden"
        self.forbidden_since = self.forbidden_since or self._clock()

    def _accepted(self) -> None:
        if self.stream_state == "forbidden":
            logger.info("Nomad accepts the event stream again")
        self.stream_state, self.forbidden_since, self._silent_ends = "following", None, 0

    # ---- one connection ----------------------------------------------------------------------
    def resync(self) -> None:
        """Re-list nodes and allocations and hand them over whole (after every (re)connect)."""
        raw_nodes, raw_allocs, index, floors = self.client.snapshot()
        nodes = [n for n in (self._node(raw) for raw in raw_nodes) if n is not None]
        allocs = [a for a in (self._alloc(raw) for raw in raw_allocs) if a is not None]
        self.handler.on_resync(nodes, allocs)
        # the lists are Nomad's state as of `index`: follow from there, so a fresh subscription (a restart)
        # does not replay the buffer's older frames about allocations long gone
        self.last_index = max(self.last_index, index)
        self._floors = floors  # a replayed event at or below its table's list index is older than the list
        self.synced.set()

    def _follow(self) -> bool:
        """Follow the stream (one per watched namespace, fanin.py) until one ends; whether the one that
        ended delivered anything (a heartbeat at least) before it did."""
        # the index is inclusive: ask for the next one and still dedupe (a too-new index replays)
        start = self.last_index + 1 if self.last_index else 0
        self._responses = []
        watched = self.client.settings.watched
        fan: FanIn | None = None
        if len(watched) == 1:
            frames: Iterator[tuple[str | None, dict[str, Any]]] = (
                (None, f) for f in self.client.event_stream(start, TOPICS, read_timeout_s=self.silence_limit_s,
                                                            opened=self._opened))
        else:
            self._stream_index = dict.fromkeys(watched, self.last_index)
            fan = FanIn(lambda ns: self.client.event_stream(start, TOPICS, read_timeout_s=self.silence_limit_s,
                                                            opened=self._opened, namespace=ns),
                        watched, self._interrupt_all)
            frames = iter(fan)
        heard = accepted = False
        try:
            for stream, frame in frames:
                heard = True
                if not accepted and (fan is None or len(fan.heard) == len(watched)):
                    accepted = True  # every stream answered: the token may read what is watched
                    self._accepted()
                self.connected.set()
                if self._stop.is_set():
                    break
                heartbeat = not frame or (not frame.get("Index") and not frame.get("Events"))
                if not heartbeat:  # a heartbeat (`api/event_stream.go`) has no index and no events
                    self.handle_frame(frame, stream)
                    self.backoff.reset()  # only data shows it works: 1.11.2+ sends a heartbeat, then EOF on error
                if self._new_namespaces():
                    break
        finally:
            if fan is not None:
                fan.close()
        return heard if fan is None else fan.ended in fan.heard or fan.ended is None

    def _track_namespaces(self) -> None:
        """Before subscribing to `*`: the namespaces it will be expanded to (at least these)."""
        self._subscribed = None
        if self.client.settings.watch_namespace != "*":
            return
        try:
            self._subscribed = frozenset(self.client.namespaces())
        except NomadError as exc:
            logger.debug("namespaces not listed (%s); new ones are taken in at the next reconnect", exc)
        self._namespaces_checked = self._clock()

    def _new_namespaces(self) -> bool:
        """Whether a namespace appeared since this stream subscribed (checked every `namespace_check_s`)."""
        if self._subscribed is None or self._clock() - self._namespaces_checked < self.namespace_check_s:
            return False
        self._namespaces_checked = self._clock()
        try:
            new = set(self.client.namespaces()) - self._subscribed
        except NomadError as exc:
            logger.debug("namespaces not listed (%s)", exc)
            return False
        if not new:
            return False
        logger.info("namespace(s) %s created after the event stream subscribed; resubscribing",
                    ", ".join(sorted(new)))
        self.namespace_resubscribes += 1
        self._resubscribe = True
        return True

    def _opened(self, resp: requests.Response) -> None:
        self._responses.append(resp)
        if self._stop.is_set():
            _interrupt(resp)

    def _interrupt_all(self) -> None:
        for resp in list(self._responses):
            _interrupt(resp)

    def handle_frame(self, frame: Mapping[str, Any], stream: str | None = None) -> None:
        """`stream`: the namespace of the stream it came on, when there are several (each has its own
        order; events on two of them, a node's, are handled once)."""
        index = int(frame.get("Index") or 0)
        if stream is not None:
            if index and index <= self._stream_index.get(stream, self.last_index):
                return
            self._handle_events(frame, index)
            self._stream_index[stream] = max(self._stream_index.get(stream, 0), index)
            self.last_index = max(self.last_index, min(self._stream_index.values()))
            return
        if index and index <= self.last_index:
            return  # handled already, or reflected in the last resync (an index too new replays the newest frame)
        self._handle_events(frame, index)
        self.last_index = max(self.last_index, index)

    def _handle_events(self, frame: Mapping[str, Any], index: int) -> None:
        for event in frame.get("Events") or []:
            key = (int(event.get("Index") or index), str(event.get("Topic")), str(event.get("Key")),
                   str(event.get("Type")))
            if key in self._seen_set or key[0] <= self._floors.get(key[1], 0):
                continue  # seen already, or older than the list the last resync handed over
            self._remember(key)
            self._dispatch(event)

    def _remember(self, key: tuple[int, str, str, str]) -> None:
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(key)
        self._seen_set.add(key)

    def _node(self, raw: Mapping[str, Any]) -> Node | None:
        """One node Nomad reports in a shape we cannot read is skipped and logged: the rest of the cluster
        must not wait on it (an aborted resync would retry forever)."""
        try:
            return decode_node(raw, self.sharing)
        except InvalidInventory as exc:
            self._skipped(f"node skipped: {exc}")
            return None

    def _alloc(self, raw: Mapping[str, Any]) -> AllocInfo | None:
        try:
            return decode_alloc(raw)
        except InvalidInventory as exc:
            self._skipped(f"allocation skipped: {exc}")
            return None

    def _skipped(self, what: str) -> None:
        if what not in self._warned:  # once per distinct problem, not once per resync
            if len(self._warned) < 1000:
                self._warned.add(what)
            logger.warning("%s", what)

    def _dispatch(self, event: Mapping[str, Any]) -> None:
        topic, etype, payload = event.get("Topic"), event.get("Type"), event.get("Payload") or {}
        if topic == "Allocation" and etype in ALLOC_TYPES and payload.get("Allocation"):
            alloc = self._alloc(payload["Allocation"])
            if alloc is not None:
                self.handler.on_alloc(alloc)
        elif topic == "Node" and etype == "NodeDeregistration":
            self.handler.on_node_removed(str(event.get("Key")))
        elif topic == "Node" and etype in NODE_TYPES and payload.get("Node"):
            node = self._node(payload["Node"])
            if node is not None:
                self.handler.on_node(node)
        elif topic == "Job" and etype == "JobDeregistered":
            job = payload.get("Job") or {}
            self.handler.on_job_deregistered(str(job.get("ID") or event.get("Key")))
        elif topic == "Evaluation":
            ev = payload.get("Evaluation") or {}
            if ev.get("FailedTGAllocs") or ev.get("Status") in ("blocked", "failed"):  # refusals only
                self.handler.on_eval(decode_eval(ev))


def _interrupt(resp: requests.Response) -> None:
    """Shut the stream's socket down: unlike close(), this wakes a recv blocked in another thread."""
    fp = getattr(getattr(resp.raw, "_fp", None), "fp", None)
    sock = getattr(getattr(fp, "raw", None), "_sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    resp.close()
