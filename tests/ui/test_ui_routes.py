"""The dashboard's server side over ASGI: its files without a token (and nothing else), the inventory's
holders (folded for a team's caller), /v1/teams and /v1/history behind the token rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.inventory import Gpu, GpuMode, MigSlice, Node
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.units import MigProfile
from nomad_gpu.service.accounting.history import History
from nomad_gpu.service.admission.access import OTHER_TEAM
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

ROOT = "root-token-0123456789abcdef"
VISION = "vision-token-0123456789abcdef"
A800 = "NVIDIA A800-SXM4-80GB"


class NoActuator:
    def submit(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("no registration expected")

    def stop(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no stop expected")


def node() -> Node:
    gpus = (Gpu(InstanceId("GPU-0"), A800), Gpu(InstanceId("GPU-1"), A800),
            Gpu(InstanceId("GPU-S"), A800, mode=GpuMode.SHARED), Gpu(InstanceId("GPU-bad"), A800, healthy=False))
    migs = (MigSlice(InstanceId("MIG-0"), "NVIDIA H100", MigProfile.parse("3g.40gb")),
            MigSlice(InstanceId("MIG-1"), "NVIDIA H100", MigProfile.parse("3g.40gb")))
    return Node(NodeId("n1"), name="gpu-1", cpu_mhz=64_000, memory_mb=512_000, gpus=gpus, migs=migs)


@pytest.fixture
def service() -> Iterator[SchedulerService]:
    fair = FairShareConfig(teams={Team("vision"): TeamPolicy(weight=3.0, quota_gpu=2.0)})
    svc = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings(fair=fair))  # type: ignore[arg-type]
    svc.on_node(node())
    p = AllocPlacement
    svc.ledger.reserve(EntryId("q000001"), Team("vision"), [p("g", 0, NodeId("n1"), 0, 0, (InstanceId("GPU-0"),),
                                                              A800, gpu_equivalents=1.0)])
    svc.ledger.reserve(EntryId("q000002"), Team("nlp"), [p("g", 0, NodeId("n1"), 0, 0, (InstanceId("GPU-S"),), A800,
                                                           share_milli=250, gpu_equivalents=0.25),
                                                         p("h", 0, NodeId("n1"), 0, 0, (InstanceId("MIG-1"),),
                                                           "NVIDIA H100 MIG 3g.40gb", gpu_equivalents=3 / 7)])
    yield svc
    svc.stop()


@pytest.fixture
def client(service: SchedulerService) -> TestClient:
    history = History()
    history.record(1_800_000_000, gpus_in_use=1.0, queued=2, admitted_total=0)
    return TestClient(create_app(service, token=ROOT, access=AccessSettings(tokens={VISION: "vision"}),
                                 nomad_address="http://nomad.example:4646", history=history))


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(("path", "kind"), [("/ui", "text/html"), ("/ui/", "text/html"),
                                            ("/ui/app.js", "text/javascript"), ("/ui/charts.js", "text/javascript"),
                                            ("/ui/style.css", "text/css")])
def test_the_dashboards_files_need_no_token(client: TestClient, path: str, kind: str) -> None:
    r = client.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", ["/ui/__init__.py", "/ui/../api.py", "/ui/nope.js", "/uix", "/ui/app.js/x"])
def test_nothing_else_is_served_and_the_api_keeps_its_token(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code in (401, 404) and "error" in r.json()
    for api in ("/v1/teams", "/v1/history", "/v1/inventory"):
        assert client.get(api).status_code == 401
        assert client.get(api, headers=as_("wrong-token-0123456789abcdef")).status_code == 401


def test_the_page_loads_only_its_own_scripts() -> None:
    page = TestClient(create_app(SchedulerService(SqliteStore(), NoActuator(),  # type: ignore[arg-type]
                                                  SchedulingSettings()))).get("/ui").text
    assert '<script src="/ui/app.js" defer></script>' in page and "http" not in page.split("<body>")[0]


def test_the_inventory_names_each_devices_holders(client: TestClient) -> None:
    (n,) = client.get("/v1/inventory", headers=as_(ROOT)).json()["nodes"]
    gpus = {g["id"]: g for g in n["gpus"]}
    assert gpus["GPU-0"]["holders"] == [{"entry": "q000001", "team": "vision", "milli": 1000}]
    assert gpus["GPU-S"]["holders"] == [{"entry": "q000002", "team": "nlp", "milli": 250}]
    assert gpus["GPU-S"]["free_milli"] == 750 and gpus["GPU-1"]["holders"] == []
    assert gpus["GPU-bad"]["healthy"] is False
    migs = {m["id"]: m for m in n["migs"]}
    assert migs["MIG-1"]["holders"][0]["entry"] == "q000002" and migs["MIG-1"]["profile"] == "3g.40gb"
    assert migs["MIG-0"]["holders"] == [] and migs["MIG-0"]["free"] is True
    assert n["draining"] is False and n["eligible"] is True


def test_a_team_sees_its_own_holders_and_only_another_team_elsewhere(client: TestClient) -> None:
    (n,) = client.get("/v1/inventory", headers=as_(VISION)).json()["nodes"]
    gpus = {g["id"]: g for g in n["gpus"]}
    assert gpus["GPU-0"]["holders"][0]["entry"] == "q000001"
    assert gpus["GPU-S"]["holders"] == [{"entry": OTHER_TEAM, "team": OTHER_TEAM, "milli": 250}]
    assert "nlp" not in client.get("/v1/inventory", headers=as_(VISION)).text
    assert "q000002" not in client.get("/v1/inventory", headers=as_(VISION)).text


def test_teams_in_use_quota_and_fair_share(client: TestClient, service: SchedulerService) -> None:
    out = client.get("/v1/teams", headers=as_(ROOT)).json()
    capacity = 4 + 2 * 3 / 7
    assert out["capacity_gpu"] == round(capacity, 3)
    teams = {t["team"]: t for t in out["teams"]}
    # both teams hold capacity; vision weighs 3, nlp the default 1
    assert teams["vision"]["in_use_gpu"] == 1.0 and teams["vision"]["quota_gpu"] == 2.0
    assert teams["vision"]["fair_share_gpu"] == round(capacity * 3 / 4, 3)
    assert teams["nlp"]["in_use_gpu"] == round(0.25 + 3 / 7, 3) and teams["nlp"]["quota_gpu"] is None
    assert teams["nlp"]["fair_share_gpu"] == round(capacity / 4, 3)
    folded = {t["team"]: t for t in client.get("/v1/teams", headers=as_(VISION)).json()["teams"]}
    assert set(folded) == {"vision", OTHER_TEAM} and folded[OTHER_TEAM]["in_use_gpu"] == teams["nlp"]["in_use_gpu"]


def test_history_and_the_nomad_address_for_links(client: TestClient) -> None:
    h = client.get("/v1/history", headers=as_(VISION)).json()
    assert h["step_s"] == 60 and isinstance(h["minutes"], list)
    assert client.get("/v1/status", headers=as_(ROOT)).json()["nomad_address"] == "http://nomad.example:4646"


def test_every_served_file_exists_and_ships_in_the_wheel() -> None:
    import fnmatch
    import tomllib
    from importlib import resources
    from pathlib import Path

    from nomad_gpu.service import ui

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["nomad_gpu.service.ui"]
    for name in ui.FILES:
        assert resources.files(ui).joinpath(name).is_file(), name
        assert any(fnmatch.fnmatch(name, g) for g in globs), f"{name} is not package data"
