"""Which row of `report` an entry counts in: a sweep's trials are class `hpo` unless the sweep names one
(as the scheduler treats them), not `-`."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, gpu_node, service
from starlette.testclient import TestClient

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.http.api import create_app
from nomad_gpu.store import SqliteStore


def test_sweep_trials_count_as_hpo_by_class() -> None:
    s = service(SqliteStore(), FakeNomad(), Clock(), ManualExecutor())
    s.on_resync([gpu_node("n1", 8)], [])
    base: dict[str, Any] = {"team": "vision", "task": {"image": "b"}, "gpu": {"count": 1}}
    s.submit({**base, "kind": "sweep", "name": "lr", "sweep": {"parameters": {"lr": [0.1, 0.2, 0.3]}}})
    s.submit({**base, "kind": "sweep", "name": "ab", "class": "exploratory", "sweep": {"parameters": {"x": [1, 2]}}})
    s.submit({**base, "name": "plain"})
    s.submit({**base, "name": "ft", "class": "training"})
    r = TestClient(create_app(s)).get("/v1/usage?since=1d&by=class")
    assert r.status_code == 200, r.text
    assert {row["key"]: row["jobs"] for row in r.json()["rows"]} == {"hpo": 3, "exploratory": 2, "-": 1,
                                                                      "training": 1}
    s.stop()


ALICE, BOB, NLP = "alice-0123456789abcdef00", "bob-0123456789abcdef0000", "nlp-0123456789abcdef0000"


def test_report_by_user_and_by_sweep() -> None:
    """A token may carry a user name (`api.tokens` `user:`); what it submits records it, and a spec cannot
    claim one itself."""
    from nomad_gpu.service.config.settings import access_from_mapping

    access = access_from_mapping({"tokens": {ALICE: {"team": "vision", "user": "alice"},
                                             BOB: {"team": "vision", "user": "bob"}, NLP: {"team": "nlp"}}})
    s = service(SqliteStore(), FakeNomad(), Clock(), ManualExecutor())
    s.on_resync([gpu_node("n1", 8)], [])
    client = TestClient(create_app(s, access=access))

    def submit(token: str, text: str) -> dict[str, Any]:
        r = client.post("/v1/jobs", content=text, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 201, r.text
        return r.json()

    job = "name: {}\ntask: {{image: b}}\ngpu: {{count: 1}}\n"
    submit(ALICE, job.format("a1"))
    submit(ALICE, "kind: sweep\n" + job.format("lr") + "sweep: {parameters: {lr: [1, 2]}}\n")
    submit(BOB, job.format("b1") + "meta: {nomad_gpu_user: alice}\n")  # claims to be alice: it stays bob's
    submit(NLP, job.format("n1") + "meta: {nomad_gpu_user: alice}\n")  # a token without a user: no user
    mine = {"Authorization": f"Bearer {ALICE}"}
    by_user = TestClient(create_app(s)).get("/v1/usage?since=1d&by=user").json()["rows"]
    assert {row["key"]: row["jobs"] for row in by_user} == {"alice": 3, "bob": 1, "-": 1}
    by_sweep = TestClient(create_app(s)).get("/v1/usage?since=1d&by=sweep").json()["rows"]
    assert sorted(row["jobs"] for row in by_sweep) == [2, 3] and "-" in {row["key"] for row in by_sweep}
    assert [row["key"] for row in client.get("/v1/usage?by=user", headers=mine).json()["rows"]] == ["alice", "bob"]
    with pytest.raises(InvalidRequest, match="user must be a name"):
        access_from_mapping({"tokens": {ALICE: {"team": "vision", "user": "alice smith"}}})
    s.stop()
