"""Namespaces (the real-Nomad issue, section 3): submissions only to configured namespaces; each job is
registered, followed and stopped in its own namespace, and GPUs held in any namespace count."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from nomad_gpu.service.config.settings import AccessSettings, access_from_mapping
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService

SPEC = "name: ns-job\nteam: t\nnamespace: ml\ntask: {image: busybox}\ngpu: {count: 1}\n"




def test_only_configured_namespaces_take_submissions(service: SchedulerService) -> None:
    refused = TestClient(create_app(service)).post("/v1/jobs", content=SPEC)
    assert refused.status_code == 403 and "'ml' is not open" in refused.json()["error"]
    assert service.store.list() == []
    opened = TestClient(create_app(service, access=AccessSettings(namespaces=frozenset({"default", "ml"}))))
    r = opened.post("/v1/jobs", content=SPEC)
    assert r.status_code == 201 and r.json()["entries"][0]["namespace"] == "ml"


def test_the_namespaces_setting_is_checked() -> None:
    assert access_from_mapping({"namespaces": ["default", "ml"]}).namespaces == {"default", "ml"}
    with pytest.raises(Exception, match="namespaces"):
        access_from_mapping({"namespaces": []})
