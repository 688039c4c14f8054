"""A watched namespace list: one event stream per namespace (the token may not read `*`, and Nomad
checks `read-job` in every namespace `*` expands to: `nomad/event_endpoint.go` `validateACL`, v2.0.5).
Frames of every stream are handled once, in each stream's order; the resync lists each namespace."""

from __future__ import annotations

import threading
import time
from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.acl import AclToken
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.nomad.decode import NO_SHARING, AllocInfo
from nomad_gpu.nomad.watcher import Watcher

CLUSTER = {"name": "ns-list", "namespaces": ["ml", "research"], "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]}]}
TOKENS = (AclToken("admin", management=True),
          AclToken("two", {"ml": ("write",), "research": ("write",)}, node="read"))
JOB = """job "{name}" {{
  type = "batch"
  group "main" {{
    task "work" {{
      driver = "docker"
      config {{ image = "busybox" }}
      meta {{ nomad_gpu_dev_duration_s = "0.2" }}
      resources {{ cpu = 100
                  memory = 64 }}
    }}
  }}
}}
"""


class Recorder:
    def __init__(self) -> None:
        self.allocs: list[AllocInfo] = []
        self.resynced: list[int] = []
        self.nodes = 0
        self.lock = threading.Lock()

    def on_resync(self, nodes: list[Any], allocs: list[AllocInfo]) -> None:
        self.resynced.append(len(allocs))

    def on_node(self, node: Any) -> None:
        self.nodes += 1

    def on_node_removed(self, node_id: str) -> None: ...

    def on_alloc(self, alloc: AllocInfo) -> None:
        with self.lock:
            self.allocs.append(alloc)

    def on_job_deregistered(self, job_id: str) -> None: ...
    def on_eval(self, evaluation: Any) -> None: ...


def _register(dc: DevCluster, name: str, namespace: str) -> None:
    admin = nomad.Nomad(address=dc.url, timeout=5, token="admin")
    job = admin.jobs.parse(JOB.format(name=name), canonicalize=True)
    r = requests.post(f"{dc.url}/v1/jobs", json={"Job": job}, params={"namespace": namespace},
                      headers={"X-Nomad-Token": "admin"}, timeout=5)
    r.raise_for_status()


@pytest.mark.e2e
def test_each_watched_namespace_has_its_stream_and_every_event_is_handled_once() -> None:
    with DevCluster(CLUSTER, speed=1.0, heartbeat_s=0.2, acl_tokens=TOKENS) as dc:
        settings = NomadSettings(address=dc.url, token="two", watch_namespace="ml, research")
        assert settings.watched == ("ml", "research")
        rec = Recorder()
        watcher = Watcher(NomadClient(settings), rec, NO_SHARING, heartbeat_s=0.2)
        watcher.start()
        try:
            deadline = time.monotonic() + 10
            while watcher.stream_state != "following" and time.monotonic() < deadline:
                time.sleep(0.02)
            assert watcher.stream_state == "following"
            assert dc.broker.subscriber_count == 2
            _register(dc, "in-ml", "ml")
            _register(dc, "in-research", "research")
            while time.monotonic() < deadline and {a.job_id for a in rec.allocs
                                                   if a.client_status.value == "complete"} != {"in-ml", "in-research"}:
                time.sleep(0.02)
        finally:
            watcher.stop()
        done = [(a.job_id, a.client_status.value) for a in rec.allocs if a.client_status.value == "complete"]
        assert sorted(done) == [("in-ml", "complete"), ("in-research", "complete")], "each once"
        assert watcher.stream_state == "following" and watcher.reconnects == 0


def test_the_list_is_read_from_the_environment() -> None:
    assert NomadSettings.from_env({}).watched == ("*",)
    assert NomadSettings.from_env({"NOMAD_GPU_WATCH_NAMESPACES": "ml,research,ml"}).watched == ("ml", "research")
    assert NomadSettings.from_env({"NOMAD_GPU_WATCH_NAMESPACES": "ml,*"}).watched == ("*",)


@pytest.mark.e2e
def test_a_watched_namespace_the_token_may_not_read_is_a_refusal() -> None:
    tokens = (*TOKENS, AclToken("ml-only", {"ml": ("write",)}, node="read"))
    with DevCluster(CLUSTER, heartbeat_s=0.2, acl_tokens=tokens) as dc:
        settings = NomadSettings(address=dc.url, token="ml-only", watch_namespace="ml,research")
        watcher = Watcher(NomadClient(settings), Recorder(), NO_SHARING, heartbeat_s=0.2)
        watcher.forbidden_retry_s = 0.3
        watcher.start()
        try:
            deadline = time.monotonic() + 10
            while watcher.stream_state != "forbidden" and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            watcher.stop()
        assert watcher.stream_state == "forbidden"
