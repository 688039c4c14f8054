"""Which row of `report` an entry counts in: a sweep's trials are class `hpo` unless the sweep names one
(as the scheduler treats them), not `-`."""

from __future__ import annotations

from typing import Any

from fakes import Clock, FakeNomad, ManualExecutor, gpu_node, service
from starlette.testclient import TestClient

from nomad_gpu.service.api import create_app
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
