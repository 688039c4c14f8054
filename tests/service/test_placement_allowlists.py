"""Where a team's jobs may go (issue 26, item 8): `node_pool: reserved` from any team was placed on the
reserved H200s. Node pools and datacenters have service-wide allowlists like drivers and namespaces, a
token's grant narrows all four, and a template is checked at submit time."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.api import create_app
from nomad_gpu.service.scheduler import SchedulerService
from nomad_gpu.service.settings import AccessSettings, access_from_mapping

VISION = "vision-0123456789abcdef"
NLP = "nlp-0123456789abcdef0000"


def config(**api: Any) -> AccessSettings:
    return access_from_mapping({"tokens": {VISION: {"team": "vision", **api.pop("vision", {})},
                                           NLP: {"team": "nlp"}}, **api})


def post(client: TestClient, token: str, text: str) -> Any:
    return client.post("/v1/jobs", content=text, headers={"Authorization": f"Bearer {token}"})


def job(extra: str = "", task: str = "{image: i}") -> str:
    return f"name: j\n{extra}task: {task}\n"


def test_a_node_pool_is_refused_unless_the_service_opens_it(service: SchedulerService) -> None:
    client = TestClient(create_app(service, access=config()))
    r = post(client, NLP, job("node_pool: reserved\n"))
    assert r.status_code == 403 and "node_pools" in r.json()["error"]
    assert post(client, NLP, job()).status_code == 201  # no pool: Nomad's `default`
    assert post(client, NLP, job("node_pool: default\n")).status_code == 201


def test_a_grant_narrows_the_service_wide_lists(service: SchedulerService) -> None:
    access = config(node_pools=["default", "reserved"], namespaces=["default", "ml"],
                    allowed_drivers=["docker", "exec"],
                    vision={"node_pools": ["default"], "namespaces": ["ml"], "drivers": ["docker"]})
    client = TestClient(create_app(service, access=access))
    assert post(client, NLP, job("node_pool: reserved\n")).status_code == 201
    assert post(client, VISION, job("node_pool: reserved\n")).status_code == 403
    assert post(client, VISION, job()).status_code == 403  # namespace default: not in the grant
    assert post(client, VISION, job("namespace: ml\n")).status_code == 201
    r = post(client, VISION, job("namespace: ml\n", "{driver: exec, command: /bin/true}"))
    assert r.status_code == 403 and "driver" in r.json()["error"]


def test_datacenters_are_kept_to_the_allowlist(service: SchedulerService) -> None:
    client = TestClient(create_app(service, access=config(datacenters=["dc1", "dc2"])))
    assert post(client, NLP, job("datacenters: [dc3]\n")).status_code == 403
    assert post(client, NLP, job("datacenters: ['dc*']\n")).status_code == 403  # a glob may reach others
    stored = post(client, NLP, job()).json()["entries"][0]
    assert stored["spec"]["datacenters"] == ["dc1", "dc2"]  # "any" means any of those allowed
    assert post(client, NLP, job("datacenters: [dc2]\n")).status_code == 201


def test_a_grant_may_not_open_what_the_service_does_not(service: SchedulerService) -> None:
    with pytest.raises(InvalidRequest, match="node_pools"):
        config(vision={"node_pools": ["reserved"]})
    with pytest.raises(InvalidRequest, match="unknown"):
        config(vision={"pools": ["default"]})


def test_an_unknown_template_is_refused_at_submit(service: SchedulerService) -> None:
    client = TestClient(create_app(service, access=config(), templates=("batch", "service")))
    r = post(client, NLP, job("template: nosuch\n"))
    assert r.status_code == 400 and "batch" in r.json()["error"]
    assert post(client, NLP, job("template: batch\n")).status_code == 201
