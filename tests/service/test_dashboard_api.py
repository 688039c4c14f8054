"""What the dashboard reads besides the routes every client reads: whose token it is (`GET /v1/whoami`), the
queue in the scheduler's order cut into pages (`GET /v1/jobs?sort=position&limit=&offset=`), and each node's
GPU utilisation in the inventory (`gpu_util_pct`, the mean of what its busy devices report)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service
from starlette.testclient import TestClient

from nomad_gpu.api.payloads import GpuView, MigView, NodeView
from nomad_gpu.nomad.stats import DeviceUsage
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.config.settings import AccessSettings
from nomad_gpu.service.config.usageconfig import UsageSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.views import with_utilisation
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.service.loops.usage import UsageBook, UsagePoller
from nomad_gpu.store import SqliteStore

ADMIN, VISION, ALICE = "admin-t", "vision-t", "alice-t"
ACCESS = AccessSettings(tokens={VISION: "vision", ALICE: "vision"}, users={ALICE: "alice"})


def job(name: str, priority: int = 50, team: str = "vision") -> dict[str, Any]:
    return {"name": name, "team": team, "priority": priority, "task": {"image": "b"}, "gpu": {"count": 1}}


@pytest.fixture
def svc() -> tuple[SchedulerService, ManualExecutor]:
    ex = ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), Clock(), ex)
    s.on_resync([gpu_node("n1", 1)], [])
    return s, ex


def client(s: SchedulerService, token: str = ADMIN, usage: UsagePoller | None = None) -> TestClient:
    return TestClient(create_app(s, ADMIN, ACCESS, usage=usage), headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize(("token", "expected"), [(ADMIN, {"team": None, "admin": True, "user": None}),
                                                 (VISION, {"team": "vision", "admin": False, "user": None}),
                                                 (ALICE, {"team": "vision", "admin": False, "user": "alice"})])
def test_whoami_names_the_tokens_team(svc: tuple[SchedulerService, ManualExecutor], token: str,
                                      expected: dict[str, Any]) -> None:
    s, _ = svc
    r = client(s, token).get("/v1/whoami")
    assert r.status_code == 200 and r.json() == expected


def test_whoami_without_a_known_token_is_refused(svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, _ = svc
    assert client(s, "wrong-token").get("/v1/whoami").status_code == 401


def test_sort_by_position_pages_the_queue_in_the_schedulers_order(svc: tuple[SchedulerService, ManualExecutor]
                                                                  ) -> None:
    s, ex = svc
    running = s.submit(job("first"))[0].id  # takes the only GPU
    s.run_cycle()
    ex.run_all()
    low = s.submit(job("low", priority=10))[0].id
    high = s.submit(job("high", priority=90))[0].id
    held = s.submit(job("held", priority=99))[0].id
    s.hold(held)
    s.run_cycle()
    ex.run_all()
    c = client(s)

    def ids(query: str) -> list[str]:
        r = c.get(f"/v1/jobs?state=queued,admitted,running{query}")
        assert r.status_code == 200, r.text
        return [e["id"] for e in r.json()["entries"]]

    assert ids("") == [running, low, high, held]  # submission order, as before
    assert ids("&sort=position") == [high, low, held, running]  # decided first, then not considered, then live
    assert ids("&sort=position&limit=2") == [high, low]
    assert ids("&sort=position&limit=2&offset=2") == [held, running]
    assert ids("&sort=position&offset=3") == [running]
    assert ids("&sort=submitted&limit=1&offset=1") == [low]
    assert [e["id"] for e in client(s, VISION).get("/v1/jobs?sort=position&limit=1").json()["entries"]] == [high]


def test_an_unknown_sort_is_refused(svc: tuple[SchedulerService, ManualExecutor]) -> None:
    s, _ = svc
    r = client(s).get("/v1/jobs?sort=priority")
    assert r.status_code == 400 and "sort must be one of submitted, position" in r.json()["error"]


class _Source:
    """Nomad's allocation stats: every device of the allocation at `util` %."""

    def __init__(self, util: float, devices: tuple[str, ...]) -> None:
        self.util, self.devices = util, devices

    def alloc_stats(self, alloc_id: str, timeout_s: float) -> dict[str, Any]:
        value = {"FloatNumeratorVal": self.util, "Unit": "%"}
        return {"ResourceUsage": {"DeviceStats": [{"Vendor": "nvidia", "Type": "gpu", "Name": "A100",
                                                   "InstanceStats": {d: {"Summary": value, "Stats": {"Attributes": {
                                                       "GPU utilization": value}}} for d in self.devices}}]},
                "Tasks": {}}


def test_the_inventory_carries_each_nodes_gpu_utilisation() -> None:
    ex = ManualExecutor()
    s = service(SqliteStore(), FakeNomad(), Clock(), ex)
    s.on_resync([gpu_node("n1", 2), gpu_node("n2", 1)], [])
    entry = s.submit(job("busy") | {"gpu": {"count": 2}})[0]
    s.run_cycle()
    ex.run_all()
    e = s.store.get(entry.id)
    devices = tuple(i for p in e.placements for i in p["instance_ids"])
    s.on_alloc(alloc(e.nomad_job_id, "running", devices=devices))
    poller = UsagePoller(_Source(64.0, devices), s, UsageSettings(interval_s=0), Metrics())
    assert poller.poll_once() == 1
    nodes = {n["name"]: n for n in client(s, usage=poller).get("/v1/inventory").json()["nodes"]}
    assert (nodes["n1"]["gpu_util_pct"], nodes["n1"]["gpu_util_devices"]) == (64.0, 2)
    assert (nodes["n2"]["gpu_util_pct"], nodes["n2"]["gpu_util_devices"]) == (None, 0)  # nothing runs there
    assert client(s).get("/v1/inventory").json()["nodes"][0]["gpu_util_pct"] is None  # no poller: not known


def test_node_utilisation_is_the_mean_of_its_reporting_devices() -> None:
    book = UsageBook(UsageSettings())
    book.record("a", [DeviceUsage("GPU-1", 90.0), DeviceUsage("GPU-2", None, 100, 1000)], now=1)
    book.record("b", [DeviceUsage("GPU-3-share-0", 30.0), DeviceUsage("GPU-3-share-1", 30.0)], now=1)
    book.record("c", [DeviceUsage("MIG-x", 10.0)], now=1)
    assert book.utilisation() == {"GPU-1": 90.0, "GPU-3": 30.0, "MIG-x": 10.0}  # a shared GPU once
    node = NodeView(id="n", gpus=(GpuView(id="GPU-1"), GpuView(id="GPU-2"), GpuView(id="GPU-3", mode="shared")),
                    migs=(MigView(id="MIG-x"),))
    (out,) = with_utilisation([node], book.utilisation())
    assert (out.gpu_util_pct, out.gpu_util_devices) == (43.3, 3)
    book.retain(["a"])
    assert book.utilisation() == {"GPU-1": 90.0}  # ended entries' devices report nothing
