"""NOMAD_GPU_ADDR without a scheme is plain http, as users expect from NOMAD_ADDR."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from nomad_gpu.cli.connect import with_scheme
from nomad_gpu.cli.main import main


@pytest.mark.parametrize(("given", "used"), [
    ("127.0.0.1:4690", "http://127.0.0.1:4690"),
    (" localhost:4690 ", "http://localhost:4690"),
    ("http://127.0.0.1:4690", "http://127.0.0.1:4690"),
    ("https://gpu.example:4690", "https://gpu.example:4690"),
])
def test_an_address_without_scheme_is_http(given: str, used: str) -> None:
    assert with_scheme(given) == used


def test_the_cli_reaches_an_address_without_scheme() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(main, ["queue"], env={"NOMAD_GPU_ADDR": f"127.0.0.1:{port}"})
    assert result.exit_code == 1
    assert f"cannot reach nomad-gpu at http://127.0.0.1:{port}" in result.stderr
    assert "InvalidSchema" not in result.stderr and "No connection adapters" not in result.stderr
