"""How much one team may hold (issue 26, item 4): 100 queued specs of 0.9 MB (60,000 env entries each)
took the service from 57 MB to 1.5 GB and another team's list to 7.6 s. A spec's env and size are capped
(an oversize spec: 413), and each team's live entries and stored bytes are limited (429)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from nomad_gpu.service.config.limits import TeamLimits
from nomad_gpu.service.config.settings import AccessSettings, access_from_mapping
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService

VISION = "vision-0123456789abcdef"
NLP = "nlp-0123456789abcdef0000"
TOKENS = {VISION: "vision", NLP: "nlp"}


def post(client: TestClient, token: str, text: str) -> Any:
    return client.post("/v1/jobs", content=text, headers={"Authorization": f"Bearer {token}",
                                                          "Content-Type": "application/yaml"})


def job(name: str, env: int = 1, value: str = "v") -> str:
    pairs = ", ".join(f"K{i}: {value}" for i in range(env))
    return f"name: {name}\ntask: {{image: i, env: {{{pairs}}}}}\n"


def test_more_env_entries_than_any_task_needs_are_refused(service: SchedulerService) -> None:
    client = TestClient(create_app(service, access=AccessSettings(tokens=TOKENS)))
    assert post(client, VISION, job("ok", env=1000)).status_code == 201
    r = post(client, VISION, job("many", env=1001))
    assert r.status_code == 400 and "1000" in r.json()["error"]


def test_a_spec_over_the_stored_size_is_413(service: SchedulerService) -> None:
    client = TestClient(create_app(service, access=AccessSettings(tokens=TOKENS)))
    r = post(client, VISION, job("big", env=600, value="x" * 500))  # ~300 KB under the 1 MiB body limit
    assert r.status_code == 413 and "KiB" in r.json()["error"]
    assert service.store.list() == []


def test_a_team_over_its_entries_is_429_and_the_other_team_is_not(service: SchedulerService) -> None:
    access = AccessSettings(tokens=TOKENS, team_limits=TeamLimits(max_entries=3, max_stored_bytes=1 << 20))
    client = TestClient(create_app(service, access=access))
    for i in range(3):
        assert post(client, VISION, job(f"j{i}")).status_code == 201
    r = post(client, VISION, job("j3"))
    assert r.status_code == 429 and "3 live entries" in r.json()["error"] and "max_entries" in r.json()["error"]
    sweep = "kind: sweep\nname: hp\ntask: {image: i}\nsweep: {parameters: {lr: [1, 2, 3, 4]}}\n"
    assert post(client, NLP, sweep).status_code == 429  # four trials are four entries
    assert post(client, NLP, job("theirs")).status_code == 201
    first = service.store.list(team="vision")[0].id
    assert client.delete(f"/v1/jobs/{first}", headers={"Authorization": f"Bearer {VISION}"}).status_code == 200
    assert post(client, VISION, job("j3")).status_code == 201  # an ended entry frees its place


def test_a_team_over_its_stored_bytes_is_429(service: SchedulerService) -> None:
    access = AccessSettings(tokens=TOKENS, team_limits=TeamLimits(max_entries=100, max_stored_bytes=20_000))
    client = TestClient(create_app(service, access=access))
    assert post(client, VISION, job("a", env=200, value="x" * 40)).status_code == 201
    r = post(client, VISION, job("b", env=200, value="x" * 40))
    assert r.status_code == 429 and "max_stored_bytes" in r.json()["error"]
    assert post(client, NLP, job("c", env=200, value="x" * 40)).status_code == 201


def test_the_limits_come_from_the_config_with_defaults() -> None:
    assert access_from_mapping({}).team_limits == TeamLimits()
    got = access_from_mapping({"team_limits": {"max_entries": 50, "max_stored_bytes": 1000000}}).team_limits
    assert got == TeamLimits(max_entries=50, max_stored_bytes=1000000)


@pytest.mark.parametrize("raw", [{"max_entries": 0}, {"max_stored_bytes": "1G"}, {"other": 1}])
def test_bad_limits_are_one_line(raw: dict[str, Any]) -> None:
    from nomad_gpu.domain.errors import InvalidRequest
    with pytest.raises(InvalidRequest, match="team_limits"):
        access_from_mapping({"team_limits": raw})


def test_a_team_keeps_a_bounded_history_and_its_usage_is_kept(service: SchedulerService) -> None:
    """Finished entries counted against nothing and were kept 30 days (issue 31, item 4): a team's kept
    entries are bounded, its oldest finished pruned first, and `/v1/usage` answers as before the pruning."""
    limits = TeamLimits(max_entries=300, max_stored_bytes=1 << 20, max_kept_entries=600, max_kept_bytes=64 << 20)
    client = TestClient(create_app(service, access=AccessSettings(tokens=TOKENS, team_limits=limits)))
    headers = {"Authorization": f"Bearer {NLP}", "X-Nomad-Gpu-Client": "test"}
    assert post(client, VISION, job("mine")).status_code == 201
    for round_ in range(5):
        values = ", ".join(str(i) for i in range(250))
        r = post(client, NLP, f"kind: sweep\nname: hp{round_}\ntask: {{image: i}}\nsweep: {{parameters: "
                              f"{{lr: [{values}]}}}}\n")
        assert r.status_code == 201, r.text
        sweep_id = r.json()["entries"][0]["sweep"]
        assert client.delete(f"/v1/sweeps/{sweep_id}", headers=headers).status_code == 200
        assert len(service.store.list(team="nlp")) <= 600
    # every one of the 1,250 cancelled trials is still counted, though at most 600 entries are kept
    rows = client.get("/v1/usage?since=1d", headers=headers).json()["rows"]
    assert rows == [{"key": "nlp", "gpu_hours": 0.0, "jobs": 1250, "attempts": 0, "mean_wait_s": None,
                     "p95_wait_s": None, "failures": 0, "idle_gpu_hours": 0.0, "reclaimed_gpu_hours": 0.0,
                     "reclaims": 0, "preemptions": 0, "lost_gpu_hours": 0.0}]
    kept = {e.sweep for e in service.store.list(team="nlp")}
    assert "hp4-s5" in kept and "hp0-s1" not in kept  # the oldest went first
    assert len(service.store.list(team="vision")) == 1


def test_kept_limits_default_to_twice_the_live_ones_and_may_not_be_below_them() -> None:
    from nomad_gpu.domain.errors import InvalidRequest
    got = access_from_mapping({"team_limits": {"max_entries": 50_000}}).team_limits
    assert got.max_kept_entries == 100_000 and got.max_kept_bytes == TeamLimits().max_kept_bytes
    with pytest.raises(InvalidRequest, match="max_kept_entries"):
        access_from_mapping({"team_limits": {"max_entries": 500, "max_kept_entries": 400}})
