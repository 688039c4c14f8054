"""Nomad not answering is said in one line: where, and why in words (no urllib3 pool internals)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from nomad_gpu.nomad.client import NomadClient, NomadUnavailable
from nomad_gpu.nomad.connection import NomadSettings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("call", ["nodes", "snapshot", "leader", "allocations"])
def test_a_refused_connection_is_one_line_with_the_address(call: str) -> None:
    port = _closed_port()
    client = NomadClient(NomadSettings(address=f"http://127.0.0.1:{port}", timeout_s=2))
    with pytest.raises(NomadUnavailable) as info:
        getattr(client, call)()
    text = str(info.value)
    assert text.endswith(f"cannot reach Nomad at http://127.0.0.1:{port}: connection refused"), text
    assert "\n" not in text and "HTTPConnectionPool" not in text and "BaseNomadException" not in text
    assert info.value.retryable


def test_a_name_that_does_not_resolve_says_so() -> None:
    client = NomadClient(NomadSettings(address="http://nomad.invalid:4646", timeout_s=2))
    with pytest.raises(NomadUnavailable) as info:
        client.nodes()
    assert str(info.value) == ("list nodes: cannot reach Nomad at http://nomad.invalid:4646: "
                               "the host name does not resolve")


@pytest.mark.server
def test_the_watcher_says_an_outage_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    """Retried with back-off, an unreachable Nomad was one warning per retry (a wall of them): now one when it
    fails, one when it answers again."""
    import logging

    from nomad_gpu.devcluster import DevCluster
    from nomad_gpu.nomad.decode import NO_SHARING
    from nomad_gpu.nomad.watcher import Watcher
    from tests.nomad.test_watcher import Recorder

    port = _closed_port()
    client = NomadClient(NomadSettings(address=f"http://127.0.0.1:{port}", timeout_s=2))
    retries: list[float] = []
    cluster: list[DevCluster] = []

    def sleep(seconds: float) -> bool:
        retries.append(seconds)
        if len(retries) == 5:  # Nomad comes up (on the address the watcher retries) after five failures
            dc = DevCluster(Path(__file__).resolve().parents[2] / "clusters" / "seed-a800.yaml")
            dc.start(port=port)
            cluster.append(dc)
        if len(retries) > 5 and w.synced.is_set():
            w.stop()
        return False

    w = Watcher(client, Recorder(), NO_SHARING, sleep=sleep)
    w.backoff.initial_s, w.backoff.max_s = 0.01, 0.02
    caplog.set_level(logging.WARNING, logger="nomad_gpu.nomad.watcher")
    try:
        thread = threading.Thread(target=w.run)
        thread.start()
        thread.join(timeout=30)
    finally:
        w.stop()
        for dc in cluster:
            dc.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "nomad_gpu.nomad.watcher"]
    assert said == [f"watching Nomad: list nodes: cannot reach Nomad at http://127.0.0.1:{port}: connection refused; "
                    "retrying", "watching Nomad: it answers again"]
