"""Settings at the edge: Nomad's variables, TLS verification on by default, the token never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import Team
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.config.settings import load_scheduling


def test_tls_verification_is_on_unless_skipped() -> None:
    assert NomadSettings.from_env({}).verify is True
    assert NomadSettings.from_env({"NOMAD_CACERT": "/ca.pem"}).verify == "/ca.pem"
    for value in ("1", "true", "True", "TRUE", "t"):
        assert NomadSettings.from_env({"NOMAD_SKIP_VERIFY": value}).verify is False
    assert NomadSettings.from_env({"NOMAD_SKIP_VERIFY": "false"}).verify is True


def test_the_client_passes_verification_to_python_nomad() -> None:
    client = NomadClient(NomadSettings.from_env({"NOMAD_ADDR": "https://nomad.example:4646"}))
    assert client.api.verify is True  # python-nomad's own default is False


def test_nomad_variables_are_read() -> None:
    s = NomadSettings.from_env({"NOMAD_ADDR": "https://n:4646", "NOMAD_TOKEN": "secret-token",
                                "NOMAD_NAMESPACE": "ml", "NOMAD_REGION": "eu", "NOMAD_CLIENT_CERT": "c.pem",
                                "NOMAD_CLIENT_KEY": "k.pem", "NOMAD_TLS_SERVER_NAME": "server.global.nomad"})
    assert (s.address, s.token, s.namespace, s.region) == ("https://n:4646", "secret-token", "ml", "eu")
    assert (s.client_cert, s.client_key, s.tls_server_name) == ("c.pem", "k.pem", "server.global.nomad")
    assert "secret-token" not in repr(s)


def test_scheduling_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("policy: best-fit\nteams:\n  vision: {weight: 2, quota_gpu: 16}\n"
                   "sharing:\n  - {model: NVIDIA T4, slots: 4}\n")
    s = load_scheduling(str(cfg))
    assert s.policy == "best-fit"
    assert s.fair.team(Team("vision")).weight == 2 and s.fair.team(Team("vision")).quota_gpu == 16
    assert s.sharing.rules[0].slots == 4


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("policy: nope\n", "unknown 'nope'", id="policy"),
    pytest.param("colour: red\n", "unknown key(s) colour", id="unknown-key"),
    pytest.param("teams: {a: {weight: 0}}\n", "weight must be > 0", id="weight"),
    pytest.param("- a\n", "must be a mapping", id="not-mapping"),
])
def test_bad_scheduling_config_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_scheduling(str(cfg))
