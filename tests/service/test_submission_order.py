"""A submission's checks run in the order `service/admission/submission.py` writes down.

One spec carries a fault for every step from the one under test to the last: it must be refused by that
step, with its status, so moving a check before another is caught. Pure: the HTTP edge's steps are called
as the route calls them, the queue's through `SchedulerService.submit` over fakes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor

from nomad_gpu.domain.errors import NomadGpuError
from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.inventory import Gpu, GpuMode, Node
from nomad_gpu.service.admission.access import Caller
from nomad_gpu.service.admission.submission import STEPS, Request, check_request
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings
from nomad_gpu.service.http.httpkit import status_of
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore
from nomad_gpu.store.quota import TeamQuota

TASK = {"image": "busybox"}
RULES = AccessSettings(datacenters=frozenset({"dc1"}))
TEMPLATES = frozenset({"batch"})


class Case:
    """A submission under construction: its data, its raw body when not the data, and the team's quota."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {"name": "job", "groups": [{"name": "main", "task": dict(TASK),
                                                                "gpu": {"count": 1}}]}
        self.body: bytes | None = None
        self.quota = TeamQuota(1000, 1 << 30)

    def group(self, name: str) -> dict[str, Any]:
        return next(g for g in self.data["groups"] if g["name"] == name)

    def add(self, group: dict[str, Any]) -> None:
        self.data["groups"].append({"task": dict(TASK), **group})


def _sweep(c: Case) -> None:
    c.data.update(kind="sweep", sweep={"parameters": {"i": list(range(5000))}})
    c.group("main")["task"]["env"] = {"PAD": "y" * 20_000}


def _fleet(c: Case) -> None:
    c.group("main")["gpu"]["count"] = 16


FAULTS: list[tuple[str, Callable[[Case], None], int, str]] = [
    ("body", lambda c: setattr(c, "body", b"\xff"), 400, "the body is not UTF-8 text"),
    ("parse", lambda c: c.data.update(bogus=1), 400, "bogus"),
    ("drivers", lambda c: c.group("main")["task"].update(driver="raw_exec"), 403, "'raw_exec' is not allowed here"),
    ("namespace", lambda c: c.data.update(namespace="secret"), 403, "namespace: 'secret' is not open"),
    ("node_pool", lambda c: c.data.update(node_pool="reserved"), 403, "node_pool: 'reserved' is not open"),
    ("datacenters", lambda c: c.data.update(datacenters=["dc9"]), 403, "datacenters: 'dc9' not open"),
    ("template", lambda c: c.data.update(template="nope"), 400, "template: no template 'nope' here"),
    ("spec_size", lambda c: c.group("main")["task"].update(args=["x" * 300_000]), 413, "KiB stored, more than"),
    ("sweep_size", _sweep, 413, "the sweep would store 5000 copies"),
    ("team", lambda c: c.data.update(team="other"), 403, "this token submits for team 't'"),
    ("class", lambda c: c.add({"name": "c", "class": "serving", "share": {"milli": 250}}), 400,
     "class serving with share: is refused"),
    ("after", lambda c: c.data.update(after=["q999999"]), 400, "after: no entry or sweep 'q999999' of team 't'"),
    ("class_fleet", lambda c: c.add({"name": "big", "class": "training", "gpu_memory": "1000GiB"}), 422,
     "unschedulable: groups[big]:"),
    ("models", lambda c: c.group("main")["gpu"].update(models=["A100"]), 400, "'A100' could be any of"),
    ("fleet", _fleet, 422, "unschedulable:"),
    ("supported", lambda c: c.add({"name": "s", "count": 2, "share": {"milli": 250}}), 400,
     "a time-slice share group must have count 1"),
    ("limits", lambda c: setattr(c, "quota", TeamQuota(1000, 1)), 429, ""),
]


def _node() -> Node:
    gpus = (Gpu(InstanceId("GPU-0"), "NVIDIA A100-SXM4-80GB", 81_920),
            Gpu(InstanceId("GPU-1"), "NVIDIA A100-PCIE-40GB", 40_960),
            Gpu(InstanceId("GPU-2"), "NVIDIA L4", 23_034, mode=GpuMode.SHARED))
    return Node(NodeId("n1"), name="n1", cpu_mhz=64_000, memory_mb=512_000, gpus=gpus)


def submit(case: Case) -> None:
    """As the route does: the edge's steps, then the service's (which store the entries)."""
    svc = SchedulerService(SqliteStore(), FakeNomad(), SchedulingSettings(tick_s=0.01), clock=Clock(),
                           executor=ManualExecutor())
    svc.on_resync([_node()], [])
    body = case.body if case.body is not None else json.dumps(case.data).encode()
    checked = check_request(Request(body, "application/json", RULES, Caller("t"), TEMPLATES))
    svc.submit(checked.data, spec=checked.spec, quota=case.quota)


def test_the_table_names_every_step_in_order() -> None:
    assert tuple(step for step, *_ in FAULTS) == STEPS


def test_a_spec_without_faults_is_queued() -> None:
    submit(Case())


@pytest.mark.parametrize("first", range(len(FAULTS)), ids=[step for step, *_ in FAULTS])
def test_the_first_fault_in_step_order_is_the_one_refused(first: int) -> None:
    case = Case()
    for _, fault, _, _ in FAULTS[first:]:
        fault(case)
    case.data = copy.deepcopy(case.data)
    _, _, status, words = FAULTS[first]
    with pytest.raises(NomadGpuError) as info:
        submit(case)
    assert (status_of(info.value), words in str(info.value)) == (status, True), str(info.value)
