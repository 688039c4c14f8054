"""A namespace created after the event stream subscribed to `*` is not in the stream's expansion: the watcher
notices it at a heartbeat (every `namespace_check_s`), ends the stream and resubscribes at once. Pure, with a
fake client and clock, so the fast loop catches its removal (before, only a 43-second end-to-end test did)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from nomad_gpu.nomad.watcher import Watcher


class StreamOfHeartbeats:
    """`event_stream` yields `frames` heartbeats (`{}`); `namespaces` lists `default`, then `ml` as well once
    `created_after` heartbeats went by; every frame counted."""

    def __init__(self, frames: int, created_after: int) -> None:
        self.settings = SimpleNamespace(watched=("*",), watch_namespace="*")
        self.frames, self.created_after, self.sent = frames, created_after, 0

    def namespaces(self) -> list[str]:
        return ["default", "ml"] if self.sent >= self.created_after else ["default"]

    def event_stream(self, start: int, topics: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        for _ in range(self.frames):
            self.sent += 1
            yield {}


def test_a_namespace_made_after_subscribing_ends_the_stream_for_a_resubscribe() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # every look at the clock is a second later
        return now[0]

    client = StreamOfHeartbeats(frames=100, created_after=10)
    w = Watcher(client, handler=None, sharing=None, clock=clock, namespace_check_s=5.0)  # type: ignore[arg-type]
    w._track_namespaces()
    assert w._follow()  # heard heartbeats, then ended for the new namespace
    assert w.namespace_resubscribes == 1 and w._resubscribe
    assert client.sent < client.frames  # the stream ended early, not when it ran out


def test_no_new_namespace_no_resubscribe() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    client = StreamOfHeartbeats(frames=30, created_after=10_000)
    w = Watcher(client, handler=None, sharing=None, clock=clock, namespace_check_s=5.0)  # type: ignore[arg-type]
    w._track_namespaces()
    w._follow()
    assert w.namespace_resubscribes == 0 and not w._resubscribe and client.sent == client.frames
