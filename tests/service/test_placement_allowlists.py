"""Where a team's jobs may go (issue 26, item 8): `node_pool: reserved` from any team was placed on the
reserved H200s. Node pools and datacenters have service-wide allowlists like drivers and namespaces, a
token's grant narrows all four, and a template is checked at submit time."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.service.config.settings import AccessSettings, access_from_mapping
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService

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


def test_a_spec_without_a_pool_is_bound_to_the_one_pool_it_may_use(service: SchedulerService) -> None:
    """Issue 31, item 1: no `node_pool` was "any pool", so a token granted `[default]` ran in `reserved`.
    It is Nomad's choice (the namespace's default pool, else `default`), bound into the stored spec."""
    access = config(node_pools=["default", "reserved"], namespaces=["default", "ml"],
                    vision={"node_pools": ["default"]})
    pools = {"ml": "reserved"}  # Nomad Enterprise: namespace ml's node_pool_config.default
    client = TestClient(create_app(service, access=access, namespace_pools=pools.get))
    stored = post(client, VISION, job()).json()["entries"][0]
    assert stored["spec"]["node_pool"] == "default"
    sweep = "kind: sweep\nname: s\ntask: {image: i}\nsweep: {mode: grid, parameters: {lr: [1, 2]}}\n"
    assert {e["spec"]["node_pool"] for e in post(client, VISION, sweep).json()["entries"]} == {"default"}
    r = post(client, VISION, job("namespace: ml\n"))
    assert r.status_code == 403 and "namespace's default pool is 'reserved'" in r.json()["error"]
    assert post(client, NLP, job("namespace: ml\n")).json()["entries"][0]["spec"]["node_pool"] == "reserved"
    assert post(client, VISION, job("namespace: ml\nnode_pool: default\n")).status_code == 201
