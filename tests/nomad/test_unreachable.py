"""Nomad not answering is said in one line: where, and why in words (no urllib3 pool internals)."""

from __future__ import annotations

import socket

import pytest

from nomad_gpu.nomad.client import NomadClient, NomadSettings, NomadUnavailable


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
