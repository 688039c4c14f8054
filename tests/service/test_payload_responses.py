"""Every answer the service sends is one of the API's payloads: it parses into it and comes back the same.

Driven through the real app over a service that has admitted jobs (whole GPUs and MIG slices of one
physical GPU), so placements, holders, the MIG grouping, ETAs and the Nomad reads are all in the bodies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, service
from starlette.testclient import TestClient

from nomad_gpu.api import payloads
from nomad_gpu.api.payloads import Payload
from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, MigSlice, Node
from nomad_gpu.domain.units import MigProfile
from nomad_gpu.service.accounting.history import History
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

H100 = "NVIDIA H100 80GB HBM3"
BUS = "00000000:47:00.0"


def node() -> Node:
    gpus = tuple(Gpu(InstanceId(f"GPU-{k}"), H100, 81_559, pci_bus_id=f"00000000:0{k}:00.0") for k in range(2))
    migs = (MigSlice(InstanceId("MIG-a"), H100, MigProfile.parse("3g.40gb"), 40_448, pci_bus_id=BUS),
            MigSlice(InstanceId("MIG-b"), H100, MigProfile.parse("3g.40gb"), 40_448, pci_bus_id=BUS),
            MigSlice(InstanceId("MIG-c"), H100, MigProfile.parse("1g.10gb"), 9_984, pci_bus_id=BUS),
            MigSlice(InstanceId("MIG-z"), H100, MigProfile.parse("1g.10gb"), 9_984))  # no bus ID reported
    return Node(NodeId("n1"), name="gpu-01", cpu_mhz=64_000, memory_mb=512_000, gpus=gpus, migs=migs)


class Reads:
    """What Nomad holds for any job: one running allocation and its HCL."""

    def job(self, job_id: str, namespace: str | None = None) -> dict[str, Any] | None:
        return {"ID": job_id, "Version": 0}

    def job_allocations(self, job_id: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [{"ID": "alloc-1", "Name": f"{job_id}.main[0]", "TaskGroup": "main", "NodeID": "n1",
                 "NodeName": "gpu-01", "ClientStatus": "running", "DesiredStatus": "run", "CreateIndex": 7,
                 "TaskStates": {"main": {"State": "running"}}}]

    def job_submission(self, job_id: str, version: int, namespace: str | None = None) -> dict[str, Any] | None:
        return {"Source": 'job "x" {}', "Format": "hcl2", "Version": version}

    def task_logs(self, alloc_id: str, task: str, log_type: str, *, offset: int = 0, origin: str = "start",
                  timeout_s: float | None = None) -> bytes:
        return b"hello\n"[offset:]


def job(name: str, device: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "team": "t", "task": {"image": "busybox"}, "resources": {"cpu": 1000, "memory": 1024},
            device: {"count": 1} if device == "gpu" else {"profile": "3g.40gb"}, **more}


@pytest.fixture
def admitted() -> Iterator[tuple[SchedulerService, TestClient]]:
    ex = ManualExecutor()
    svc = service(SqliteStore(), FakeNomad(), Clock(), ex)
    svc.on_resync([node()], [])
    svc.submit(job("whole", "gpu", runtime=600))
    svc.submit(job("slice", "mig"))
    svc.submit({**job("big", "gpu"), "gpu": {"count": 8}, "allow_unschedulable": True})  # never fits: stays queued
    svc.run_cycle()
    ex.run_all()
    past = History()
    past.record(time.time(), gpus_in_use=1.5, queued=1, admitted_total=2)  # /v1/history reads the wall clock
    yield svc, TestClient(create_app(svc, nomad=Reads(), nomad_address="http://nomad:4646", history=past))
    svc.stop()


def same(cls: type[Payload], body: Any) -> Any:
    """``body`` read as ``cls`` and written again, unchanged: no field is lost, renamed or retyped."""
    parsed = cls.from_json(body)
    assert parsed.to_json() == body
    return parsed


def test_every_read_is_its_payload(admitted: tuple[SchedulerService, TestClient]) -> None:
    svc, client = admitted
    entries = same(payloads.Entries, client.get("/v1/jobs?eta=true").json()).entries
    assert [e.state for e in entries] == ["admitted", "admitted", "queued"]
    assert entries[0].placements[0].instance_ids and entries[1].placements[0].device_name == f"{H100} MIG 3g.40gb"
    assert isinstance(entries[2].eta, float | type(None)) and "eta" in entries[0].to_json()  # a live one: its end
    assert "eta" not in client.get("/v1/jobs").json()["entries"][2]  # only when asked for
    first = entries[0].id
    same(payloads.Entry, client.get(f"/v1/jobs/{first}").json())
    allocs = same(payloads.Allocations, client.get(f"/v1/jobs/{first}/allocations").json())
    assert allocs.allocations[0].node_name == "gpu-01" and allocs.nomad_ui == f"http://nomad:4646/ui/jobs/" \
        f"{entries[0].nomad_job_id}@default"
    assert same(payloads.Hcl, client.get(f"/v1/jobs/{first}/hcl").json()).hcl == 'job "x" {}'
    status = same(payloads.Status, client.get("/v1/status").json())
    assert status.nomad_address == "http://nomad:4646" and status.gpus == 2
    same(payloads.Teams, client.get("/v1/teams").json())
    assert same(payloads.History, client.get("/v1/history").json()).minutes[0].queued == 1
    (n,) = same(payloads.Inventory, client.get("/v1/inventory").json()).nodes
    assert [g.pci_bus_id for g in n.gpus] == ["00000000:00:00.0", "00000000:01:00.0"]
    (gpu,) = n.mig_gpus
    assert (gpu.pci_bus_id, gpu.slices, gpu.used_slices, gpu.free_slices, gpu.instances) == (
        BUS, 7, 3, 4, ("MIG-a", "MIG-b", "MIG-c"))
    held = [m for m in n.migs if m.holders]
    assert [(m.id, m.holders[0].entry, m.compute_slices) for m in held] == [("MIG-a", entries[1].id, 3)]
    assert {m.id: m.pci_bus_id for m in n.migs}["MIG-z"] is None


def test_every_change_answers_its_payload(admitted: tuple[SchedulerService, TestClient]) -> None:
    svc, client = admitted
    r = client.post("/v1/jobs", content="name: more\nteam: t\ntask: {image: busybox}\n")
    assert r.status_code == 201
    (entry,) = same(payloads.Entries, r.json()).entries
    assert same(payloads.Entry, client.post(f"/v1/jobs/{entry.id}/hold").json()).held
    same(payloads.Entry, client.post(f"/v1/jobs/{entry.id}/release").json())
    patch = payloads.Patch(priority=90).to_json()
    assert same(payloads.Entry, client.patch(f"/v1/jobs/{entry.id}", json=patch).json()).priority == 90
    assert same(payloads.Entry, client.delete(f"/v1/jobs/{entry.id}").json()).state == "cancelled"
    sweep = "kind: sweep\nname: lr\nteam: t\ntask: {image: busybox}\nsweep: {parameters: {lr: [0.1, 0.2]}}\n"
    trials = same(payloads.Entries, client.post("/v1/jobs", content=sweep).json()).entries
    sweep_id = trials[0].sweep
    assert same(payloads.Sweep, client.get(f"/v1/sweeps/{sweep_id}").json()).total == 2
    assert same(payloads.Sweep, client.delete(f"/v1/sweeps/{sweep_id}").json()).states == {"cancelled": 2}


def test_a_refusal_is_the_error_payload(admitted: tuple[SchedulerService, TestClient]) -> None:
    _, client = admitted
    r = client.get("/v1/jobs/q999999")
    assert r.status_code == 404
    assert same(payloads.ErrorReply, r.json()).error == "no queue entry 'q999999'"


def test_the_status_payload_holds_every_field_the_scheduler_reports(admitted: tuple[SchedulerService, TestClient]
                                                                    ) -> None:
    """A field added to the scheduler's status must be added to the payload too, or the API would drop it."""
    svc, _ = admitted
    assert set(svc.status()) <= set(payloads.Status.__dataclass_fields__)
