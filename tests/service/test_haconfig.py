"""`ha:` in the config (service/config/haconfig.py): the lease as a duration, the advertised address; a mistake is one
line naming the key, refused at start."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.haconfig import HaSettings, ha_from_mapping
from nomad_gpu.service.config.settings import load_config


@pytest.mark.parametrize(("raw", "want"), [
    pytest.param(None, HaSettings(), id="absent"),
    pytest.param({"lease": "10s"}, HaSettings(lease_s=10.0), id="seconds"),
    pytest.param({"lease": "1500ms"}, HaSettings(lease_s=1.5), id="milliseconds"),
    pytest.param({"lease": "1m"}, HaSettings(lease_s=60.0), id="minute"),
    pytest.param({"lease": 4}, HaSettings(lease_s=4.0), id="a number is seconds"),
    pytest.param({"advertise": "https://10.0.0.5:4690/"}, HaSettings(advertise="https://10.0.0.5:4690"),
                 id="advertise"),
])
def test_what_ha_accepts(raw: object, want: HaSettings) -> None:
    assert ha_from_mapping(raw) == want


@pytest.mark.parametrize(("raw", "message"), [
    pytest.param({"lease": "ten"}, "lease: must be a duration", id="words"),
    pytest.param({"lease": True}, "lease: must be a duration", id="bool"),
    pytest.param({"lease": "0.1s"}, "lease: must be from 0.5s to 300s", id="too short"),
    pytest.param({"lease": "1h"}, "lease: must be a duration", id="hours"),
    pytest.param({"leases": "10s"}, "unknown key(s) leases", id="unknown key"),
    pytest.param({"advertise": "10.0.0.5:4690"}, "advertise: must be the API's URL", id="no scheme"),
    pytest.param(["lease"], "must be a mapping", id="a list"),
])
def test_what_ha_refuses(raw: object, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace(")", r"\)")):
        ha_from_mapping(raw, "config: ha")


def test_a_bad_ha_section_stops_serve_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("ha:\n  lease: soon\n")
    with pytest.raises(InvalidRequest, match=r"config.yaml: ha: lease"):
        load_config(str(config))
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "q.db"), "--config", str(config)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "ha: lease" in result.output and not (tmp_path / "q.db").exists()
