"""Config reload (SIGHUP): teams and tokens swapped whole; a bad file keeps the old config and logs one line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from nomad_gpu.service.admission.access import LiveTokens
from nomad_gpu.service.config.settings import load_config
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.reload import reload_config
from nomad_gpu.service.loops.scheduler import SchedulerService

OLD, NEW, ROOT = "vision-0123456789abcdef", "nlp-0123456789abcdef0000", "admin-0123456789abcdef00"
FIRST = f"teams:\n  vision: {{weight: 1, quota_gpu: 4}}\napi:\n  tokens:\n    {OLD}: {{team: vision}}\n"
SECOND = (f"teams:\n  vision: {{weight: 2, quota_gpu: 8}}\n  nlp: {{quota_gpu: 2}}\n"
          f"api:\n  tokens:\n    {NEW}: {{team: nlp}}\n")


def started(service: SchedulerService, path: Path) -> tuple[TestClient, LiveTokens]:
    """The service as `serve --config path` starts it: its teams and tokens from the file."""
    scheduling, access = load_config(str(path))
    service.settings = scheduling
    live = LiveTokens(access.with_admin(ROOT))
    return TestClient(create_app(service, access=access, token=ROOT, live_tokens=live)), live


def status(client: TestClient, token: str) -> int:
    return client.get("/v1/jobs", headers={"Authorization": f"Bearer {token}"}).status_code


def test_a_reload_swaps_teams_and_tokens(service: SchedulerService, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FIRST)
    client, live = started(service, path)
    assert (status(client, OLD), status(client, NEW)) == (200, 401)
    path.write_text(SECOND)
    assert reload_config(str(path), service, live, ROOT)
    assert (status(client, OLD), status(client, NEW), status(client, ROOT)) == (401, 200, 200)
    teams = {str(team): policy for team, policy in service.settings.fair.teams.items()}
    assert (teams["vision"].weight, teams["vision"].quota_gpu, teams["nlp"].quota_gpu) == (2.0, 8.0, 2.0)
    rows = {r["team"]: r for r in client.get("/v1/teams", headers={"Authorization": f"Bearer {ROOT}"})
            .json()["teams"]}
    assert rows["vision"]["quota_gpu"] == 8.0


@pytest.mark.parametrize(("text", "words"), [
    pytest.param(FIRST.replace(OLD, "short"), "a token must be at least 16", id="short-token"),
    pytest.param(FIRST + "polcy: fifo\n", "unknown key(s) polcy", id="typo"),
    pytest.param("teams: [\n", "not valid YAML", id="not-yaml"),
    pytest.param("teams:\n  vision: {weight: 3}\n", "lists no token", id="no-token-left"),
])
def test_a_bad_file_keeps_the_old_config_and_logs_one_line(service: SchedulerService, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture, text: str,
                                                           words: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FIRST)
    client, live = started(service, path)
    before = service.settings
    path.write_text(text)
    with caplog.at_level(logging.INFO, logger="nomad_gpu.service.loops.reload"):
        assert not reload_config(str(path), service, live, None)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert words in caplog.records[0].getMessage() and "previous config stays" in caplog.records[0].getMessage()
    assert "\n" not in caplog.records[0].getMessage()
    assert service.settings is before and status(client, OLD) == 200


def test_the_connection_reserve_trusts_the_reloaded_tokens() -> None:
    """A reload swaps the tokens whose requests may use the reserved connections too (service/http/connections.py),
    so a token taken out of the config no longer claims the reserve and a new one does."""
    from nomad_gpu.service.config.limits import HttpLimits
    from nomad_gpu.service.http.connections import limited_protocol
    from nomad_gpu.service.http.connroom import Trust, token_digests, trust_of

    protocol = limited_protocol(HttpLimits(), 100, ["old-token"])
    head = [(b"authorization", b"Bearer new-token")]
    assert trust_of(head, protocol.DIGESTS) is not Trust.TRUSTED
    protocol.retrust(["new-token"])
    assert protocol.DIGESTS == token_digests(["new-token"])
    assert trust_of(head, protocol.DIGESTS) is Trust.TRUSTED
    assert trust_of([(b"authorization", b"Bearer old-token")], protocol.DIGESTS) is not Trust.TRUSTED
