"""Sweeps of two teams never share an ID, a stored spec or a cancel (issue 26, item 1).

Two teams (or two CI jobs) posting a sweep of the same name in the same millisecond used to get the same
sweep ID; the shared spec of the second was then dropped (`INSERT OR IGNORE`), so its trials read the
first team's image and secrets, and a cancel of one sweep cancelled both. The clock here stands still, so
the old collision is certain, not a race.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from nomad_gpu.render.loading import decode_spec
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, QueueEntry, SqliteStore
from tests.service.conftest import NoActuator

VISION = "vision-0123456789abcdef"
NLP = "nlp-0123456789abcdef0000"
ACCESS = AccessSettings(tokens={VISION: "vision", NLP: "nlp"})


def sweep(image: str, secret: str) -> str:
    return (f"kind: sweep\nname: hp\ntask: {{image: {image}, env: {{API_KEY: {secret}}}}}\n"
            "sweep: {parameters: {lr: [1, 2, 3]}}\n")


def open_service(path: Path) -> SchedulerService:
    return SchedulerService(SqliteStore(str(path)), NoActuator(), SchedulingSettings(), clock=lambda: 1000.0)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[SchedulerService]:
    svc = open_service(tmp_path / "q.db")
    yield svc
    svc.stop()


def post(client: TestClient, token: str, text: str) -> list[dict[str, Any]]:
    r = client.post("/v1/jobs", content=text, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text
    return list(r.json()["entries"])


def test_same_name_same_instant_sweeps_of_two_teams_stay_apart(service: SchedulerService, tmp_path: Path) -> None:
    client = TestClient(create_app(service, access=ACCESS))
    mine = post(client, VISION, sweep("vision-image", "vision-secret"))
    theirs = post(client, NLP, sweep("nlp-image", "nlp-secret"))
    assert mine[0]["sweep"] != theirs[0]["sweep"]
    got = client.get(f"/v1/jobs/{mine[1]['id']}", headers={"Authorization": f"Bearer {VISION}"}).json()
    assert got["spec"]["groups"][0]["task"]["image"] == "vision-image"
    assert "nlp-secret" not in str(got)

    r = client.delete(f"/v1/sweeps/{mine[0]['sweep']}", headers={"Authorization": f"Bearer {VISION}"})
    assert r.status_code == 200 and r.json()["total"] == 3
    assert {service.store.get(e["id"]).state for e in theirs} == {EntryState.QUEUED}

    service.stop()
    service.store.close()
    again = open_service(tmp_path / "q.db")  # the restart: each trial still reads its own team's spec
    try:
        expected = ((mine[2], "vision-image", "vision-secret"), (theirs[2], "nlp-image", "nlp-secret"))
        for entry, image, secret in expected:
            task = again.store.get(entry["id"]).spec["groups"][0]["task"]
            assert (task["image"], task["env"]["API_KEY"]) == (image, secret)
    finally:
        again.stop()


def test_sweep_ids_come_from_the_stores_sequence(service: SchedulerService) -> None:
    data = decode_spec(sweep("i", "s"), json_text=False).data
    ids = [service.submit(dict(data))[0].sweep for _ in range(5)]  # one instant: the clock stands still
    assert len(set(ids)) == 5


def test_a_sweep_cancel_touches_only_the_callers_team(service: SchedulerService) -> None:
    """Even an ID shared by two teams (a database written before IDs were unique) is cancelled per team."""
    spec = {"name": "hp-t0", "task": {"image": "i"}}
    legacy = [QueueEntry(id="", name="hp-t0", team=team, priority=50, spec=spec, submitted_at=1.0, sweep="hp-17")
              for team in ("vision", "nlp")]
    stored = service.store.add(legacy)
    for e in stored:
        service.life.track(e, None)
    client = TestClient(create_app(service, access=ACCESS))
    r = client.delete("/v1/sweeps/hp-17", headers={"Authorization": f"Bearer {VISION}"})
    assert r.status_code == 200 and r.json()["total"] == 1
    assert [service.store.get(e.id).state for e in stored] == [EntryState.CANCELLED, EntryState.QUEUED]
    listed = client.get("/v1/sweeps/hp-17", headers={"Authorization": f"Bearer {NLP}"}).json()
    assert listed["total"] == 1 and listed["states"] == {"queued": 1}
