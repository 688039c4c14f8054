"""Open metrics show each caller what its token allows (issue 31, item 6).

With `metrics_open: true` the gate let `/metrics` through without looking at the token, so every caller
was the admin: an anonymous scraper and vision's token both read `team="nlp"`. Now a token that is sent
is resolved (a team sees its own series and the rest summed as `another team`; an admin sees all; a
wrong token is a 401), and a scrape without one sees every team summed as `_all`, unless the operator
sets `metrics_open_teams: true`, which says it shows them to anyone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge
from starlette.testclient import TestClient

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.admission.access import ADMIN, OTHER_TEAM, Caller, metrics_view
from nomad_gpu.service.config.settings import AccessSettings, load_config
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService

VISION = "vision-0123456789abcdef"
NLP = "nlp-0123456789abcdef0000"
ROOT = "admin-0123456789abcdef00"
USAGE = {"vision": 1.0, "nlp": 2.0, "audio": 0.5, "_nomad": 1.0}


def open_access(*, teams: bool = False) -> AccessSettings:
    return AccessSettings(tokens={VISION: "vision", NLP: "nlp", ROOT: None}, metrics_open=True,
                          metrics_open_teams=teams)


def series(text: str) -> dict[str, float]:
    """`team` label -> value of nomad_gpu_team_gpu_in_use in a scrape."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith('nomad_gpu_team_gpu_in_use{team="'):
            label, value = line.split('"}')
            out[label.split('"', 1)[1]] = float(value)
    return out


def registry() -> CollectorRegistry:
    r = CollectorRegistry()
    gauge = Gauge("nomad_gpu_team_gpu_in_use", "GPU-equivalents held per team", ["team"], registry=r)
    for team, value in USAGE.items():
        gauge.labels(team).set(value)
    Gauge("nomad_gpu_queued", "Entries waiting", registry=r).set(3)
    return r


# the filter, pure


def test_an_anonymous_scrape_sees_every_team_summed_as_one() -> None:
    from nomad_gpu.service.admission.access import ALL_TEAMS, ANONYMOUS

    text = metrics_view(registry(), ANONYMOUS).decode()
    assert series(text) == {ALL_TEAMS: 4.5}
    assert "nomad_gpu_queued 3.0" in text  # series without a team are as they are


def test_the_operator_switch_shows_every_team_to_an_anonymous_scrape() -> None:
    from nomad_gpu.service.admission.access import ANONYMOUS

    assert series(metrics_view(registry(), ANONYMOUS, show_teams=True).decode()) == USAGE


def test_a_team_sees_its_own_series_and_the_others_summed() -> None:
    text = metrics_view(registry(), Caller("vision"), show_teams=True).decode()  # the switch is for anonymity only
    assert series(text) == {"vision": 1.0, OTHER_TEAM: 2.5, "_nomad": 1.0}


def test_the_admin_sees_every_team() -> None:
    assert series(metrics_view(registry(), ADMIN).decode()) == USAGE


def test_an_anonymous_caller_sees_no_entry_and_is_no_admin() -> None:
    from nomad_gpu.service.admission.access import ANONYMOUS

    assert not ANONYMOUS.admin and ANONYMOUS.team is not None  # `team is None` means admin in the routes


# the gate, in process


@pytest.fixture
def metered(service: SchedulerService) -> SchedulerService:
    service.metrics.set_queue(0, 0, USAGE)
    return service


@pytest.mark.parametrize(("headers", "seen"), [
    pytest.param({}, {"_all": 4.5}, id="anonymous"),
    pytest.param({"Authorization": f"Bearer {VISION}"}, {"vision": 1.0, OTHER_TEAM: 2.5, "_nomad": 1.0}, id="vision"),
    pytest.param({"X-Nomad-Gpu-Token": NLP}, {"nlp": 2.0, OTHER_TEAM: 1.5, "_nomad": 1.0}, id="nlp"),
    pytest.param({"Authorization": f"Bearer {ROOT}"}, USAGE, id="admin"),
])
def test_open_metrics_resolve_a_token_when_one_is_sent(metered: SchedulerService, headers: dict[str, str],
                                                       seen: dict[str, float]) -> None:
    answer = TestClient(create_app(metered, access=open_access())).get("/metrics", headers=headers)
    assert answer.status_code == 200
    assert series(answer.text) == seen


def test_a_wrong_token_on_open_metrics_is_refused(metered: SchedulerService) -> None:
    answer = TestClient(create_app(metered, access=open_access())).get("/metrics", headers={"Authorization":
                                                                                            "Bearer nope"})
    assert answer.status_code == 401


def test_metrics_open_teams_shows_them_without_a_token(metered: SchedulerService) -> None:
    client = TestClient(create_app(metered, access=open_access(teams=True)))
    assert series(client.get("/metrics").text) == USAGE
    assert series(client.get("/metrics", headers={"X-Nomad-Gpu-Token": VISION}).text)["vision"] == 1.0
    assert "nlp" not in series(client.get("/metrics", headers={"X-Nomad-Gpu-Token": VISION}).text)


def test_the_switch_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("api:\n  metrics_open: true\n  metrics_open_teams: true\n")
    access = load_config(str(path))[1]
    assert access.metrics_open and access.metrics_open_teams
    path.write_text("api:\n  metrics_open: true\n")
    assert not load_config(str(path))[1].metrics_open_teams  # folded unless the operator says so
    for text, fragment in (("api: {metrics_open_teams: 1}\n", "metrics_open_teams: must be true or false"),
                           ("api: {metrics_open_teams: true}\n", "metrics_open_teams: needs metrics_open: true")):
        path.write_text(text)
        with pytest.raises(InvalidRequest, match=fragment):
            load_config(str(path))


# over real sockets


@pytest.fixture
def address(metered: SchedulerService) -> Iterator[str]:
    server = ApiServer(create_app(metered, access=open_access()), plan_listen("http://127.0.0.1:0",
                                                                             token_required=True))
    server.bind()
    yield server.serve()
    server.stop()


@pytest.mark.server
def test_over_loopback_each_caller_sees_what_its_token_allows(address: str) -> None:
    def scrape(**headers: str) -> dict[str, float]:
        answer = requests.get(f"{address}/metrics", headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return series(answer.text)

    assert scrape() == {"_all": 4.5}  # before: every team, nlp's 2.0 among them
    assert scrape(Authorization=f"Bearer {VISION}") == {"vision": 1.0, OTHER_TEAM: 2.5, "_nomad": 1.0}
    assert scrape(Authorization=f"Bearer {ROOT}") == USAGE
    assert requests.get(f"{address}/metrics", headers={"Authorization": "Bearer nope"}, timeout=10).status_code == 401
    assert requests.get(f"{address}/v1/status", timeout=10).status_code == 401  # only /metrics is open
