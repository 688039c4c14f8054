"""The watcher: inclusive-index dedupe, resume, resync after reconnect, prompt stop; frames handled as they
arrive in both of Nomad's framings, the silence watchdog and the backoff rule."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests
from rawnomad import FRAMINGS, Conn, ScriptedNomad, alloc_event_frame

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.inventory import Node
from nomad_gpu.nomad.backoff import Backoff
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.nomad.decode import NO_SHARING, AllocInfo
from nomad_gpu.nomad.evaldecode import EvalInfo
from nomad_gpu.nomad.watcher import Watcher
from nomad_gpu.store.sqlite import StoreFull

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


class Recorder:
    def __init__(self) -> None:
        self.resyncs: list[tuple[int, int]] = []
        self.allocs: list[AllocInfo] = []
        self.nodes: list[Node] = []
        self.deregistered: list[str] = []
        self.evals: list[EvalInfo] = []

    def on_resync(self, nodes: list[Node], allocs: list[AllocInfo]) -> None:
        self.resyncs.append((len(nodes), len(allocs)))

    def on_node(self, node: Node) -> None:
        self.nodes.append(node)

    def on_node_removed(self, node_id: str) -> None:
        pass

    def on_alloc(self, alloc: AllocInfo) -> None:
        self.allocs.append(alloc)

    def on_job_deregistered(self, job_id: str) -> None:
        self.deregistered.append(job_id)

    def on_eval(self, evaluation: EvalInfo) -> None:
        self.evals.append(evaluation)


def alloc_frame(index: int, status: str, alloc_id: str = "a1") -> dict[str, Any]:
    alloc = {"ID": alloc_id, "JobID": "ngpu-q000001", "TaskGroup": "main", "NodeID": "n1", "ClientStatus": status,
             "ModifyIndex": index}
    return {"Index": index, "Events": [{"Topic": "Allocation", "Type": "AllocationUpdated", "Key": alloc_id,
                                        "Index": index, "Payload": {"Allocation": alloc}}]}


def watcher(handler: Recorder, url: str = "http://127.0.0.1:9", **options: Any) -> Watcher:
    return Watcher(NomadClient(NomadSettings(address=url)), handler, NO_SHARING, **options)


def wait_until(condition: Callable[[], object], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_repeated_frame_is_handled_once() -> None:
    rec = Recorder()
    w = watcher(rec)
    w.handle_frame(alloc_frame(10, "running"))
    w.handle_frame(alloc_frame(10, "running"))  # the stream's index is inclusive: the last frame comes again
    w.handle_frame(alloc_frame(11, "complete"))
    assert [a.client_status.value for a in rec.allocs] == ["running", "complete"]
    assert w.last_index == 11


def test_backoff_doubles_and_caps() -> None:
    b = Backoff(initial_s=0.1, max_s=0.5)
    assert [round(b.next(), 3) for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    b.reset()
    assert b.next() == 0.1


@pytest.mark.parametrize("nomad_version", ["2.0.5", "1.10.5"])  # hijacked and close-delimited; chunked
def test_reconnect_resyncs_and_resumes(nomad_version: str) -> None:
    dc = DevCluster(Path(__file__).resolve().parents[2] / "clusters" / "seed-a800.yaml", heartbeat_s=0.2,
                    nomad_version=nomad_version)
    url = dc.start()
    rec = Recorder()
    w = watcher(rec, url)
    w.backoff.initial_s = 0.01
    w.start()
    try:
        assert w.connected.wait(5)
        assert rec.resyncs == [(1, 0)]
        dc.drop_streams()
        deadline = time.monotonic() + 5
        while len(rec.resyncs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(rec.resyncs) >= 2 and w.reconnects >= 1
        dc.node_drain("gpu-a800-1")
        deadline = time.monotonic() + 5
        while not any(n.draining for n in rec.nodes) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(n.draining for n in rec.nodes)
    finally:
        started = time.monotonic()
        w.stop()
        assert time.monotonic() - started < 2  # no waiting for a heartbeat
        dc.stop()


# ---- both framings, the watchdog, the backoff rule ----------------------------------------------------------

EMPTY_LIST = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]"


def nomad_with_stream(framing: str, stream: Callable[[Conn, int], None]) -> ScriptedNomad:
    """Empty node and allocation lists over REST; `stream(conn, n)` serves the n-th stream request."""
    counter = {"streams": 0}

    def script(conn: Conn, n: int) -> None:
        if not nomad.requests[-1].startswith(b"GET /v1/event/stream"):
            conn.sock.sendall(EMPTY_LIST)
            conn.sock.close()
            return
        counter["streams"] += 1
        stream(conn, counter["streams"] - 1)

    nomad = ScriptedNomad(framing, script)
    return nomad


def stream_requests(nomad: ScriptedNomad) -> int:
    return sum(1 for head in list(nomad.requests) if head.startswith(b"GET /v1/event/stream"))


@pytest.mark.parametrize("framing", FRAMINGS)
def test_frames_are_handled_while_the_stream_stays_open(framing: str) -> None:
    """Against 1.11.2+ (`command/agent/event_endpoint.go`, v2.0.5: hijacked, ends only at close) the
    watcher used to wait for the close before it handled anything: 0 of 12 jobs ever completed."""
    def stream(conn: Conn, n: int) -> None:
        conn.head()
        conn.frame({})
        conn.frame(alloc_event_frame(5, status="running"))
        conn.frame(alloc_event_frame(6, status="complete"))
        nomad.release.wait(10)
        conn.end()

    with nomad_with_stream(framing, stream) as nomad:
        rec = Recorder()
        w = watcher(rec, nomad.url)
        w.start()
        try:
            wait_until(lambda: len(rec.allocs) == 2)
            assert [a.client_status.value for a in rec.allocs] == ["running", "complete"]
            assert w.last_index == 6 and w.reconnects == 0 and stream_requests(nomad) == 1
        finally:
            nomad.release.set()
            w.stop()


def test_watchdog_reconnects_after_two_silent_heartbeat_periods() -> None:
    """A half-open connection: the 200 and one heartbeat, then nothing at all."""
    opened: list[float] = []

    def stream(conn: Conn, n: int) -> None:
        opened.append(time.monotonic())
        conn.head()
        conn.frame({})
        nomad.release.wait(10)

    with nomad_with_stream("hijacked", stream) as nomad:
        w = watcher(Recorder(), nomad.url, heartbeat_s=0.1)
        w.start()
        try:
            wait_until(lambda: len(opened) >= 2)
            assert w.reconnects >= 1
            assert opened[1] - opened[0] >= 0.2  # two heartbeat periods of silence, not less
        finally:
            w.stop()


def test_heartbeats_keep_the_watchdog_quiet() -> None:
    beats = threading.Event()

    def stream(conn: Conn, n: int) -> None:
        conn.head()
        for _ in range(20):  # 1 s of heartbeats, each 0.05 s apart: well inside the 0.5 s limit
            conn.frame({})
            time.sleep(0.05)
        beats.set()
        nomad.release.wait(10)

    with nomad_with_stream("chunked", stream) as nomad:
        w = watcher(Recorder(), nomad.url, heartbeat_s=0.25)
        w.start()
        try:
            assert beats.wait(5)
            assert w.reconnects == 0 and stream_requests(nomad) == 1
        finally:
            w.stop()


class ScriptedClient(NomadClient):
    """A NomadClient whose stream plays one list of frames per connection, then ends cleanly."""

    def __init__(self, streams: list[list[dict[str, Any]]]) -> None:
        super().__init__(NomadSettings(address="http://127.0.0.1:9"))
        self.streams = streams

    def nodes(self, resources: bool = True) -> list[dict[str, Any]]:
        return []

    def allocations(self) -> list[dict[str, Any]]:
        return []

    def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, dict[str, int]]:
        return [], [], 0, {}

    def event_stream(self, index: int, topics: Sequence[str], read_timeout_s: float = 60.0,
                     opened: Callable[[requests.Response], None] | None = None,
                     namespace: str | None = None) -> Iterator[dict[str, Any]]:
        yield from self.streams.pop(0)


def test_backoff_resets_only_after_a_data_frame() -> None:
    """1.11.2+ answers a late error with 200, a heartbeat and EOF: such ends must slow the retries down,
    where they used to reconnect (and re-list everything) every 50 ms."""
    heartbeat_only: list[dict[str, Any]] = [{}]
    with_data = [{}, alloc_event_frame(9)]
    client = ScriptedClient([heartbeat_only, heartbeat_only, heartbeat_only, with_data, heartbeat_only,
                             heartbeat_only])
    rec = Recorder()
    slept: list[float] = []

    def sleep(seconds: float) -> bool:
        slept.append(round(seconds, 3))
        if not client.streams:
            w.stop()
        return False

    w = Watcher(client, rec, NO_SHARING, sleep=sleep)
    w.backoff.initial_s, w.backoff.max_s = 0.05, 5.0
    w.run()
    assert slept == [0.05, 0.1, 0.2, 0.05, 0.1, 0.2]
    assert len(rec.resyncs) == 6 and [a.client_status.value for a in rec.allocs] == ["running"]


def test_a_fresh_watcher_does_not_replay_events_of_collected_allocations() -> None:
    """`index=0` replays Nomad's whole event buffer (reference section 1): after a restart the service
    got `pending`/`running` for allocations that had completed and been garbage-collected, and booked
    their GPUs for nobody. The resync's index is where the stream resumes."""
    import nomad

    def submit(api: nomad.Nomad, job_id: str, duration_s: float) -> None:
        hcl = (f'job "{job_id}" {{\n  type = "batch"\n  datacenters = ["*"]\n'
               f'  meta {{ nomad_gpu_dev_duration_s = "{duration_s}" }}\n'
               '  group "main" {\n    task "work" {\n      driver = "docker"\n'
               '      config { image = "busybox:1" }\n      resources {\n        cpu = 100\n        memory = 64\n'
               '        device "nvidia/gpu" { count = 1 }\n      }\n    }\n  }\n}\n')
        api.jobs.register_job({"Job": api.jobs.parse(hcl), "Submission": {"Source": hcl, "Format": "hcl2"}})

    dc = DevCluster(Path(__file__).resolve().parents[2] / "clusters" / "seed-a800.yaml", heartbeat_s=0.2, speed=100)
    url = dc.start()
    try:
        api = nomad.Nomad(address=url, timeout=5)
        submit(api, "old-job", 1.0)
        wait_until(lambda: any(a["client_status"] == "complete" for a in dc.audit()["allocations"]))
        assert dc.collect_garbage()["allocs"] >= 1
        rec = Recorder()
        w = watcher(rec, url)
        w.start()
        try:
            assert w.connected.wait(5)
            submit(api, "new-job", 100.0)
            wait_until(lambda: any(a.job_id == "new-job" for a in rec.allocs))
            assert [a.job_id for a in rec.allocs if a.job_id == "old-job"] == []
        finally:
            w.stop()
    finally:
        dc.stop()


def test_a_node_that_does_not_decode_is_skipped_not_a_failed_resync() -> None:
    class OneBadNode(ScriptedClient):
        def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, dict[str, int]]:
            good = {"ID": "n1", "Name": "n1", "Status": "ready"}
            bad = {"ID": "n2", "NodeResources": {"Cpu": {"CpuShares": "lots"}}}
            return [good, bad], [{"ClientStatus": "running"}], 7, {}

    rec = Recorder()
    w = Watcher(OneBadNode([]), rec, NO_SHARING)
    w.resync()
    assert rec.resyncs == [(1, 0)] and w.last_index == 7


def test_a_refused_placement_reaches_the_handler_with_nomads_reasons() -> None:
    """The register's evaluation completes with FailedTGAllocs and a blocked follow-up is created
    (`nomad/structs/eval.go` CreateBlockedEval, `scheduler/generic_sched.go`, v2.0.5): the watcher
    follows the Evaluation topic and hands such evaluations over, decoded."""
    import nomad

    cluster = {"name": "refuse", "nodes": [{"name": "n1", "drivers": {"docker": False, "exec": True},
                                            "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 1,
                                                      "memory_mib": 81920}]}]}
    dc = DevCluster(cluster, heartbeat_s=0.2)
    url = dc.start()
    rec = Recorder()
    w = watcher(rec, url)
    w.start()
    try:
        assert w.connected.wait(5)
        hcl = ('job "refused" {\n  type = "batch"\n  datacenters = ["*"]\n  group "main" {\n    task "work" {\n'
               '      driver = "docker"\n      config { image = "busybox:1" }\n'
               '      resources {\n        cpu = 100\n        memory = 64\n      }\n    }\n  }\n}\n')
        api = nomad.Nomad(address=url, timeout=5)
        api.jobs.register_job({"Job": api.jobs.parse(hcl), "Submission": {"Source": hcl, "Format": "hcl2"}})
        wait_until(lambda: any(e.job_id == "refused" and e.refused for e in rec.evals))
        failed = next(e for e in rec.evals if e.job_id == "refused" and e.failures)
        assert "group main" in failed.failures and "driver" in failed.failures.lower()
    finally:
        w.stop()
        dc.stop()


def test_an_unreachable_nomad_is_retried_from_half_a_second_not_every_50_ms() -> None:
    """A refused connection says Nomad is down: retrying it 50 ms later only knocks on a closed door (the
    chaos run counted 5 refused listings in an outage's first second). A stream that merely ended still
    reconnects from 50 ms (above)."""
    from nomad_gpu.nomad.client import NomadError

    class Down(ScriptedClient):
        def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, dict[str, int]]:
            raise NomadError("list nodes: cannot reach Nomad: connection refused")

    slept: list[float] = []

    def sleep(seconds: float) -> bool:
        slept.append(round(seconds, 3))
        if len(slept) == 6:
            w.stop()
        return False

    w = Watcher(Down([]), Recorder(), NO_SHARING, sleep=sleep)
    w.run()
    assert slept == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


class FullDisk(Recorder):
    """A service whose store cannot take in Nomad's state (issue 31, item 7) until `space` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.space = threading.Event()

    def on_resync(self, nodes: list[Node], allocs: list[AllocInfo]) -> None:
        if not self.space.is_set():
            raise StoreFull("the queue database's disk is full: nothing was stored; free space on it and retry")
        super().on_resync(nodes, allocs)


def test_a_full_disk_is_said_once_and_retried_with_the_error_backoff(caplog: pytest.LogCaptureFixture) -> None:
    """Once every 5 s the service logged "event handling failed; resyncing" with a traceback while its disk
    was full: a full disk is no handler bug. One warning while it lasts, one line when it is over."""
    rec = FullDisk()
    slept: list[float] = []

    def sleep(seconds: float) -> bool:
        slept.append(round(seconds, 3))
        if len(slept) == 4:
            rec.space.set()
        if rec.resyncs:
            w.stop()
        return False

    w = Watcher(ScriptedClient([[]] * 8), rec, NO_SHARING, sleep=sleep)
    with caplog.at_level(logging.INFO, logger="nomad_gpu.nomad.watcher"):
        w.run()
    assert slept[:4] == [0.5, 1.0, 2.0, 4.0] and len(rec.resyncs) == 1
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.exc_info for r in said] == [None, None], [r.getMessage() for r in said]
    assert "cannot take in Nomad's state" in said[0].getMessage() and "again" in said[1].getMessage()


def test_resync_soon_cuts_the_wait_short() -> None:
    """The store calls it when a write fits again after the disk was full: what the disk kept out is taken
    in at once, not after the backoff (here 60 s; the bound below is generous)."""
    rec = FullDisk()
    w = Watcher(ScriptedClient([[] for _ in range(8)]), rec, NO_SHARING)
    w.backoff.unreachable_s = w.backoff.max_s = 60.0
    w.start()
    try:
        wait_until(lambda: w.reconnects >= 1)
        rec.space.set()
        w.resync_soon()
        wait_until(lambda: rec.resyncs, timeout_s=10.0)
    finally:
        w.stop()
