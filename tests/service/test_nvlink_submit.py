"""`gpu: {nvlink: true}` through the service: refused with the reason on a fleet that publishes no topology
(the stock plugin), queued and placed on an NVLink set where the nomad-gpu plugin publishes one."""

from __future__ import annotations

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, service
from starlette.testclient import TestClient

from nomad_gpu import bundled
from nomad_gpu.devcluster.config import load_cluster_file
from nomad_gpu.devcluster.inventory import build_nodes
from nomad_gpu.domain.inventory import Node
from nomad_gpu.nomad.decode import decode_node
from nomad_gpu.render import SpecError, load_spec
from nomad_gpu.service.http.api import create_app
from nomad_gpu.store import SqliteStore

SPEC = "name: ddp\ntask: {image: img}\ngpu: {count: 4, nvlink: true}\n"


def fleet(cluster: str) -> list[Node]:
    return [decode_node(n.to_json()) for n in build_nodes(load_cluster_file(bundled.bundled_cluster(cluster)))]


def post(cluster: str, text: str) -> tuple[int, dict[str, object]]:
    svc = service(SqliteStore(), FakeNomad(), Clock(), ManualExecutor())
    svc.on_resync(fleet(cluster), [])
    try:
        r = TestClient(create_app(svc)).post("/v1/jobs", content=text, headers={"Content-Type": "application/yaml"})
        return r.status_code, r.json()
    finally:
        svc.stop()


def test_refused_with_the_reason_where_no_topology_is_published() -> None:
    status, body = post("seed-a800", SPEC)
    assert status == 422
    assert str(body["error"]).startswith("unschedulable: groups[main]: 4 NVLink-connected GPUs of one model on one "
                                         "node asked for; no node here publishes its topology")
    assert post("seed-a800", SPEC.replace(", nvlink: true", ""))[0] == 201  # the same ask without it is taken


def test_queued_where_a_node_has_such_a_set() -> None:
    assert post("nvlink-fleet", SPEC)[0] == 201


def test_one_gpu_has_no_link() -> None:
    with pytest.raises(SpecError, match=r"^line 3: gpu: nvlink: true needs count >= 2 \(got 1\)"):
        load_spec("name: d\ntask: {image: i}\ngpu: {count: 1, nvlink: true}\n")
