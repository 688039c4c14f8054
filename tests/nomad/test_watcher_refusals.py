"""A token Nomad refuses the event stream (the real-Nomad issue, third round, item 4): from 1.11.2 the
refusal is `200 OK` and a close before the first heartbeat, before it a 403. The watcher must call it
`forbidden`, say so once at ERROR, and retry slowly, not reconnect at INFO forever."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.acl import AclToken
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.nomad.decode import NO_SHARING
from nomad_gpu.nomad.watcher import Watcher

CLUSTER = {"name": "acl", "namespaces": ["ml"], "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}
TOKENS = (AclToken("svc", {"*": ("read",)}, node="read"), AclToken("ml-only", {"ml": ("write",)}, node="read"))


class Quiet:
    def on_resync(self, *args: Any) -> None: ...
    def on_node(self, *args: Any) -> None: ...
    def on_node_removed(self, *args: Any) -> None: ...
    def on_alloc(self, *args: Any) -> None: ...
    def on_job_deregistered(self, *args: Any) -> None: ...
    def on_eval(self, *args: Any) -> None: ...


def _run(version: str, token: str, caplog: pytest.LogCaptureFixture) -> tuple[Watcher, list[logging.LogRecord]]:
    with DevCluster(CLUSTER, acl_tokens=TOKENS, nomad_version=version, heartbeat_s=0.2) as dc:
        watcher = Watcher(NomadClient(NomadSettings(address=dc.url, token=token)), Quiet(), NO_SHARING,
                          heartbeat_s=0.2)
        watcher.forbidden_retry_s = 0.3
        with caplog.at_level(logging.INFO, logger="nomad_gpu.nomad.watcher"):
            watcher.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and watcher.reconnects < 6 and watcher.stream_state != "following":
                time.sleep(0.05)
            if watcher.stream_state == "following":
                time.sleep(0.5)
            watcher.stop()
    return watcher, [r for r in caplog.records if r.name == "nomad_gpu.nomad.watcher"]


@pytest.mark.e2e
@pytest.mark.parametrize("version", ["2.0.5", "1.10.5"])
def test_a_refused_stream_is_forbidden_said_once_and_retried_slowly(version: str,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    watcher, records = _run(version, "ml-only", caplog)
    assert watcher.stream_state == "forbidden" and watcher.forbidden_since is not None
    errors = [r for r in records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "read-job in every namespace (namespace=*)" in errors[0].getMessage()
    assert not [r for r in records if "event stream ended at index" in r.getMessage()]


@pytest.mark.e2e
def test_a_token_that_may_read_everything_follows(caplog: pytest.LogCaptureFixture) -> None:
    watcher, records = _run("2.0.5", "svc", caplog)
    assert watcher.stream_state == "following"
    assert not [r for r in records if r.levelno >= logging.ERROR]
