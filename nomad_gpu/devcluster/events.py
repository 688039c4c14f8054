"""The event broker behind `GET /v1/event/stream`, with Nomad's buffer and resume semantics.

Our service's watcher lives on this stream, so its quirks are copied exactly (reference section 1):
one frame per raft index holding only the events a subscriber matches (no frame when none match);
`topic` is `Topic` or `Topic:Key`, keys match `Key` or any `FilterKeys` entry exactly, `*` matches
all; the resume `index` is inclusive; an index older than the bounded in-memory buffer silently
starts at the oldest frame, a newer one replays the newest frame, and 0 replays the whole buffer.

Writers publish from any thread (HTTP handlers, the timer thread) while holding the cluster lock,
so frames are handed out in index order. Each subscriber owns an asyncio queue on the server's event
loop and an outbox in front of it: a frame goes into the outbox, and the first frame of a batch
schedules one callback on the loop that moves the whole batch into the queue, so a write never
blocks on a slow reader, a frame reaches the socket as soon as the loop runs, and a burst of frames
costs one wake-up of the loop rather than one each (`call_soon_threadsafe` writes to the loop's
self-pipe every time; from the loop's own thread plain `call_soon` is enough).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

TOPICS = ("Allocation", "Job", "Node", "Evaluation", "Deployment", "NodePool", "Service", "*")


class StreamRequestError(ValueError):
    """A bad `topic` or `index` parameter: 400 with this text (reference section 1)."""


@dataclass(frozen=True)
class Event:
    topic: str
    type: str
    key: str
    namespace: str
    filter_keys: tuple[str, ...] | None
    index: int
    payload: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({
            "Topic": self.topic,
            "Type": self.type,
            "Key": self.key,
            "Namespace": self.namespace,
            "FilterKeys": None if self.filter_keys is None else list(self.filter_keys),
            "Index": self.index,
            "Payload": self.payload,
        }, separators=(",", ":"))


@dataclass(frozen=True)
class _Frame:
    index: int
    events: tuple[tuple[Event, str], ...]  # each event with its JSON, serialised once


def parse_topics(values: Iterable[str]) -> dict[str, frozenset[str]]:
    """`topic` query values to {topic: keys}; no value at all means `*:*`."""
    topics: dict[str, set[str]] = {}
    for value in values:
        if value.count(":") > 1:
            raise StreamRequestError(f"Invalid topic query: invalid topic format {value!r}: too many ':'")
        topic, _, key = value.partition(":")
        if not topic:
            raise StreamRequestError(f"Invalid topic query: empty topic in {value!r}")
        topics.setdefault(topic, set()).add(key or "*")
    if not topics:
        topics["*"] = {"*"}
    return {topic: frozenset(keys) for topic, keys in topics.items()}


def parse_index(value: str | None) -> int:
    if value is None or value == "":
        return 0
    try:
        index = int(value)
    except ValueError:
        raise StreamRequestError(f"Unable to parse index: strconv.ParseUint: parsing {value!r}: "
                                 "invalid syntax") from None
    if index < 0:
        raise StreamRequestError(f"Unable to parse index: {value!r} is negative")
    return index


class Subscription:
    """One stream connection: its filter and the asyncio queue its frames go to (None = closed)."""

    def __init__(self, topics: dict[str, frozenset[str]], namespaces: frozenset[str] | str,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.topics = topics
        # the namespaces it was granted, fixed at subscribe time: `*` was expanded by the caller
        # (`nomad/event_endpoint.go` `validateACL`, v2.0.5); a bare "*" here passes every namespace
        self.namespaces = frozenset({namespaces}) if isinstance(namespaces, str) else namespaces
        self.loop = loop
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._outbox: list[bytes | None] = []  # delivered, not yet moved into `queue` by the loop
        self._outbox_lock = threading.Lock()

    def matches(self, event: Event) -> bool:
        # Events without a namespace (Node, NodePool) always pass the namespace filter
        # (`nomad/stream/subscription.go` `filter`, v2.0.5).
        if event.namespace and event.namespace not in self.namespaces and "*" not in self.namespaces:
            return False
        for topic in (event.topic, "*"):
            keys = self.topics.get(topic)
            if keys is None:
                continue
            if "*" in keys or event.key in keys or any(k in keys for k in event.filter_keys or ()):
                return True
        return False

    def render(self, frame: _Frame) -> bytes | None:
        events = [text for event, text in frame.events if self.matches(event)]
        if not events:
            return None
        return f'{{"Index":{frame.index},"Events":[{",".join(events)}]}}\n'.encode()

    def deliver(self, data: bytes | None) -> None:
        """Hand a frame (None: the end) to the loop, in order; callable from any thread."""
        with self._outbox_lock:
            self._outbox.append(data)
            if len(self._outbox) > 1:
                return  # the batch's callback is scheduled and has not run yet: it takes this one too
        try:
            if asyncio._get_running_loop() is self.loop:
                self.loop.call_soon(self._drain_outbox)
            else:
                self.loop.call_soon_threadsafe(self._drain_outbox)
        except RuntimeError:  # the loop is closed: the server is stopping; nothing to deliver to
            pass

    def _drain_outbox(self) -> None:
        with self._outbox_lock:
            batch, self._outbox = self._outbox, []
        for data in batch:
            self.queue.put_nowait(data)


class EventBroker:
    """A bounded buffer of frames plus the live subscribers."""

    def __init__(self, buffer_size: int = 100, clock: Callable[[], float] = time.time) -> None:
        if buffer_size < 1:
            raise ValueError("event buffer size must be at least 1")
        self._buffer: deque[_Frame] = deque(maxlen=buffer_size)
        self._subscribers: set[Subscription] = set()
        self._lock = threading.Lock()
        self._clock = clock

    def publish(self, index: int, events: list[Event]) -> float:
        """Buffer one raft index's events and hand them to every matching subscriber; returns the
        wall-clock time at which the frame was handed over."""
        frame = _Frame(index, tuple((event, event.to_json()) for event in events))
        with self._lock:
            self._buffer.append(frame)
            for subscriber in self._subscribers:
                data = subscriber.render(frame)
                if data is not None:
                    subscriber.deliver(data)
            return self._clock()

    def subscribe(self, topics: dict[str, frozenset[str]], namespace: frozenset[str] | str, index: int,
                  loop: asyncio.AbstractEventLoop) -> tuple[Subscription, list[bytes]]:
        """Register a subscriber and return the buffered frames it should see first (atomically, so
        nothing is lost or repeated between the backlog and the live frames)."""
        subscription = Subscription(topics, namespace, loop)
        with self._lock:
            frames = [frame for frame in self._buffer if frame.index >= index]
            if not frames and self._buffer and index > self._buffer[-1].index:
                frames = [self._buffer[-1]]  # a future index replays the newest frame
            backlog = [data for data in map(subscription.render, frames) if data is not None]
            self._subscribers.add(subscription)
        return subscription, backlog

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(subscription)

    def drop_all(self) -> int:
        """Close every open stream (fault injection); returns how many were open."""
        with self._lock:
            dropped = list(self._subscribers)
            self._subscribers.clear()
        for subscription in dropped:
            subscription.deliver(None)
        return len(dropped)

    @property
    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def oldest_index(self) -> int | None:
        with self._lock:
            return self._buffer[0].index if self._buffer else None
