"""Several event streams read as one: one stream per watched namespace.

Nomad checks `read-job` in EVERY namespace that `namespace=*` expands to (`nomad/event_endpoint.go`
`validateACL`, v2.0.5), so a token scoped to the namespaces the service manages is refused the whole
`*` stream. Such a service watches a list of namespaces instead, and the event stream takes one
namespace per subscription: one stream each. Each stream is read on its own thread (a read blocks
until the next line); the frames come out here in arrival order, tagged with their namespace, for the
watcher to handle one at a time. Any stream that ends ends them all, so the watcher resyncs once and
resubscribes every stream from the same index.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

Frame = dict[str, Any]
_END = object()


class FanIn:
    """Frames of `open_stream(namespace)` for every namespace, as (namespace, frame), in arrival order."""

    def __init__(self, open_stream: Callable[[str], Iterator[Frame]], namespaces: Sequence[str],
                 close_all: Callable[[], None]) -> None:
        self._open = open_stream
        self._namespaces = tuple(namespaces)
        self._close_all = close_all
        self._inbox: queue.Queue[tuple[str, object]] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self.heard: set[str] = set()
        """The namespaces whose stream delivered anything (a heartbeat at least)."""
        self.ended: str | None = None
        """The namespace whose stream ended first."""

    def __iter__(self) -> Iterator[tuple[str, Frame]]:
        for namespace in self._namespaces:
            thread = threading.Thread(target=self._read, args=(namespace,), name=f"nomad-stream-{namespace}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()
        try:
            while True:
                namespace, item = self._inbox.get()
                if item is _END or isinstance(item, BaseException):
                    self.ended = namespace
                    if isinstance(item, BaseException):
                        raise item
                    return
                self.heard.add(namespace)
                assert isinstance(item, dict)
                yield namespace, item
        finally:
            self.close()

    def close(self) -> None:
        """End every stream (their reads are interrupted) and wait for the reader threads."""
        self._close_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def _read(self, namespace: str) -> None:
        try:
            for frame in self._open(namespace):
                self._inbox.put((namespace, frame))
            self._inbox.put((namespace, _END))
        except BaseException as exc:  # handed to the consumer, which raises it on its own thread
            self._inbox.put((namespace, exc))
