"""Submissions against the fleet: names users see resolved to Nomad's, what no node could run refused (422),
an opt-in that queues it anyway, and an entry whose nodes went away that says so while it waits."""

from __future__ import annotations

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, service
from starlette.testclient import TestClient

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, MigSlice, Node, NodeStatus
from nomad_gpu.domain.units import MigProfile
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def node(name: str, model: str, n: int, **kw: object) -> Node:
    gpus = tuple(Gpu(InstanceId(f"GPU-{name}-{k}"), model, 81_920) for k in range(n))
    return Node(NodeId(name), name=name, cpu_mhz=64_000, memory_mb=512_000, gpus=gpus, **kw)  # type: ignore[arg-type]


def mig_node(name: str) -> Node:
    migs = tuple(MigSlice(InstanceId(f"MIG-{name}-{k}"), H100, MigProfile.parse("3g.40gb"), 40_960,
                          pci_bus_id="0000:01:00.0") for k in range(2))
    return Node(NodeId(name), name=name, cpu_mhz=64_000, memory_mb=512_000, migs=migs)


FLEET = [node("a1", A100, 8), node("h1", H100, 4, status=NodeStatus.DOWN), mig_node("m1")]


@pytest.fixture
def svc() -> SchedulerService:
    s = service(SqliteStore(), FakeNomad(), Clock(), ManualExecutor())
    s.on_resync(FLEET, [])
    return s


def post(svc: SchedulerService, body: str) -> tuple[int, dict[str, object]]:
    r = TestClient(create_app(svc)).post("/v1/jobs", content=body, headers={"Content-Type": "application/yaml"})
    return r.status_code, r.json()


@pytest.mark.parametrize(("asks", "line"), [
    pytest.param("gpu: {count: 9}", "at most 8 on one node here", id="nine-gpus"),
    pytest.param("gpu: {models: [A10]}", f"models here: {A100}, {H100}", id="no-such-model"),
    pytest.param("mig: {profile: 1g.5gb}", "MIG profiles here: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb",
                 id="no-such-profile"),
    pytest.param("gpu: {count: 1}\nresources: {memory: 2000000}", "2000000 MB memory on one node", id="memory"),
])
def test_what_no_node_could_run_is_refused_422_with_the_nearest(svc: SchedulerService, asks: str, line: str) -> None:
    status, body = post(svc, f"name: never\ntask: {{image: b}}\n{asks}\n")
    assert status == 422, body
    error = str(body["error"])
    assert error.startswith("unschedulable: ") and line in error and "--allow-unschedulable" in error
    assert "\n" not in error
    assert svc.store.list() == []


def test_the_opt_in_queues_it_and_its_wait_reason_says_unschedulable(svc: SchedulerService) -> None:
    status, body = post(svc, "name: later\ntask: {image: b}\ngpu: {count: 9}\nallow_unschedulable: true\n")
    assert status == 201, body
    svc.run_cycle()
    (entry,) = svc.store.list()
    assert entry.state.value == "queued"
    assert entry.reason.startswith("unschedulable: groups[main]: 9 GPUs of one model on one node asked for")


def test_a_down_node_counts_it_may_come_back(svc: SchedulerService) -> None:
    status, body = post(svc, f"name: h\ntask: {{image: b}}\ngpu: {{count: 4, models: ['{H100}']}}\n")
    assert status == 201, body


def test_an_entry_whose_nodes_went_away_says_so_while_it_waits(svc: SchedulerService) -> None:
    status, _ = post(svc, "name: big\ntask: {image: b}\ngpu: {count: 8}\n")
    assert status == 201
    svc.on_node_removed("a1")
    svc.run_cycle()
    (entry,) = svc.store.list()
    assert entry.reason.startswith("unschedulable: groups[main]: 8 GPUs of one model on one node asked for; "
                                   "at most 4 on one node here")
    svc.on_node(node("a2", A100, 8))
    svc.run_cycle()
    assert not svc.store.list()[0].reason.startswith("unschedulable")


@pytest.mark.parametrize(("written", "stored"), [
    pytest.param("A100", A100, id="queue-form"),
    pytest.param("a100-80gb", A100, id="dashboard-form-any-case"),
    pytest.param("H100 80GB", H100, id="leading-words"),
    pytest.param(A100, A100, id="exact"),
])
def test_model_names_as_users_see_them_are_stored_exact(svc: SchedulerService, written: str, stored: str) -> None:
    status, body = post(svc, f"name: m\ntask: {{image: b}}\ngpu: {{models: ['{written}']}}\n")
    assert status == 201, body
    (entry,) = svc.store.list()
    assert entry.spec["groups"][0]["gpu"]["models"] == [stored]


def test_an_ambiguous_model_name_is_refused_with_the_candidates() -> None:
    s = service(SqliteStore(), FakeNomad(), Clock(), ManualExecutor())
    s.on_resync([node("a1", A100, 8), node("a2", "NVIDIA A100-PCIE-40GB", 8)], [])
    status, body = post(s, "name: m\ntask: {image: b}\ngpu: {models: [A100]}\n")
    assert status == 400
    assert body["error"] == ("groups[main].gpu.models: 'A100' could be any of NVIDIA A100-PCIE-40GB, "
                             f"{A100}; write the one you mean")


def test_a_sweep_is_checked_once_and_its_trials_store_the_exact_name(svc: SchedulerService) -> None:
    sweep = ("kind: sweep\nname: s\ntask: {image: b}\ngpu: {models: [a100]}\n"
             "sweep: {parameters: {lr: [1, 2, 3]}}\n")
    status, body = post(svc, sweep)
    assert status == 201, body
    assert {e.spec["groups"][0]["gpu"]["models"][0] for e in svc.store.list()} == {A100}
    status, body = post(svc, sweep.replace("models: [a100]", "count: 9"))
    assert status == 422 and len(svc.store.list()) == 3


def test_before_the_fleet_is_known_nothing_is_refused() -> None:
    s = service(SqliteStore(), FakeNomad(), Clock(), ManualExecutor())
    status, body = post(s, "name: early\ntask: {image: b}\ngpu: {count: 9}\n")
    assert status == 201, body
