"""The watcher: inclusive-index dedupe, resume, resync after reconnect, prompt stop."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.inventory import Node
from nomad_gpu.nomad.client import NomadClient, NomadSettings
from nomad_gpu.nomad.decode import NO_SHARING, AllocInfo
from nomad_gpu.nomad.watcher import Backoff, Watcher


class Recorder:
    def __init__(self) -> None:
        self.resyncs: list[tuple[int, int]] = []
        self.allocs: list[AllocInfo] = []
        self.nodes: list[Node] = []
        self.deregistered: list[str] = []

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


def alloc_frame(index: int, status: str, alloc_id: str = "a1") -> dict[str, Any]:
    alloc = {"ID": alloc_id, "JobID": "ngpu-q000001", "TaskGroup": "main", "NodeID": "n1", "ClientStatus": status,
             "ModifyIndex": index}
    return {"Index": index, "Events": [{"Topic": "Allocation", "Type": "AllocationUpdated", "Key": alloc_id,
                                        "Index": index, "Payload": {"Allocation": alloc}}]}


def watcher(handler: Recorder, url: str = "http://127.0.0.1:9") -> Watcher:
    return Watcher(NomadClient(NomadSettings(address=url)), handler, NO_SHARING)


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


def test_reconnect_resyncs_and_resumes() -> None:
    dc = DevCluster(Path(__file__).resolve().parents[2] / "clusters" / "seed-a800.yaml", heartbeat_s=0.2)
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
