"""How frames and replies leave the dev cluster: the subscriber's outbox, a reply's single write, and
the job copy behind `canonicalize`. Cheaper paths that must say exactly what the slower ones said."""

from __future__ import annotations

import asyncio
import copy
import socket
import threading
from typing import Any

import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.events import Subscription
from nomad_gpu.devcluster.hijack import HeadWithBody
from nomad_gpu.devcluster.jobs import canonicalize, copy_json

from .helpers import jobspec


class CountingLoop:
    """The two scheduling calls a subscription makes, counted, on a real loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.threadsafe = self.soon = 0

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> Any:
        self.threadsafe += 1
        return self.loop.call_soon_threadsafe(callback, *args)

    def call_soon(self, callback: Any, *args: Any) -> Any:
        self.soon += 1
        return self.loop.call_soon(callback, *args)


def test_a_burst_from_other_threads_is_one_wake_up_and_keeps_its_order() -> None:
    loop = asyncio.new_event_loop()
    counting = CountingLoop(loop)
    subscription = Subscription({"*": frozenset({"*"})}, "*", loop)
    subscription.loop = counting  # type: ignore[assignment]
    try:
        def publish(first: int) -> None:
            for i in range(first, first + 50):
                subscription.deliver(b"%d" % i)

        for first in (0, 50):  # two writers one after the other, as the cluster lock orders them
            writer = threading.Thread(target=publish, args=(first,))
            writer.start()
            writer.join()
        subscription.deliver(None)
        loop.run_until_complete(asyncio.sleep(0))
        received = [subscription.queue.get_nowait() for _ in range(subscription.queue.qsize())]
        assert received == [b"%d" % i for i in range(100)] + [None]
        assert (counting.threadsafe, counting.soon) == (1, 0)
    finally:
        loop.close()


def test_frames_published_on_the_loop_thread_need_no_self_pipe_write() -> None:
    loop = asyncio.new_event_loop()
    counting = CountingLoop(loop)
    subscription = Subscription({"*": frozenset({"*"})}, "*", loop)
    subscription.loop = counting  # type: ignore[assignment]

    async def publish() -> list[bytes | None]:
        subscription.loop = loop  # the running-loop check compares with the real loop
        subscription.deliver(b"1")
        subscription.loop = counting  # type: ignore[assignment]
        subscription.deliver(b"2")
        await asyncio.sleep(0)
        return [subscription.queue.get_nowait() for _ in range(subscription.queue.qsize())]

    try:
        assert loop.run_until_complete(publish()) == [b"1", b"2"]
        assert counting.threadsafe == 0
    finally:
        loop.close()


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        if data:  # as asyncio's transports, which ignore an empty write
            self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_a_reply_head_goes_out_with_its_body_and_a_lone_head_on_the_next_turn() -> None:
    loop = asyncio.new_event_loop()
    try:
        transport = FakeTransport()
        cycle = HeadWithBody(transport, loop)  # type: ignore[arg-type]
        cycle.write(b"HTTP/1.1 200 OK\r\n\r\n")
        cycle.write(b"body")
        cycle.write(b"")
        assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]

        streamed = FakeTransport()
        cycle = HeadWithBody(streamed, loop)  # type: ignore[arg-type]
        cycle.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert streamed.writes == []
        loop.run_until_complete(asyncio.sleep(0))
        assert streamed.writes == [b"HTTP/1.1 200 OK\r\n\r\n"]

        closed = FakeTransport()
        cycle = HeadWithBody(closed, loop)  # type: ignore[arg-type]
        cycle.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        cycle.close()
        assert (closed.writes, closed.closed) == ([b"HTTP/1.1 400 Bad Request\r\n\r\n"], True)
    finally:
        loop.close()


@pytest.mark.server
def test_pipelined_replies_are_whole_and_in_order(seed: DevCluster) -> None:
    host, port = seed.url.removeprefix("http://").split(":")
    request = b"GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(request)
        data = b""
        while data.count(b"HTTP/1.1 200 OK\r\n") < 2 or not data.endswith(b"]"):
            chunk = conn.recv(65536)
            assert chunk, data
            data += chunk
    first, second = data.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert first.endswith(b'\r\n\r\n"127.0.0.1:4647"')
    assert b"content-length" in first.lower() and b'"Name":"default"' in second


@pytest.mark.parametrize("spec", [
    pytest.param(jobspec("copy-1", gpus=2, duration=0.5), id="gpu-job"),
])
@pytest.mark.server
def test_copy_json_is_a_deep_copy(seed: DevCluster, spec: str) -> None:
    from nomad_gpu.devcluster.hcl import parse_job_hcl

    job = parse_job_hcl(spec)
    job["Meta"] = {"a": "1", "nested": {"x": [1, 2.5, None, True]}}
    copied = copy_json(job)
    assert copied == copy.deepcopy(job)
    copied["TaskGroups"][0]["Tasks"][0]["Resources"]["CPU"] = -1
    copied["Meta"]["nested"]["x"].append(3)
    assert job["TaskGroups"][0]["Tasks"][0]["Resources"]["CPU"] != -1
    assert job["Meta"]["nested"]["x"] == [1, 2.5, None, True]
    assert canonicalize(job) == canonicalize(canonicalize(job))
    odd = {"t": (1, [2])}  # not JSON: deep-copied all the same
    assert copy_json(odd) == odd and copy_json(odd)["t"][1] is not odd["t"][1]
