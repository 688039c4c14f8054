"""MIG re-layout end to end through Nomad's API: planner, apply job, fingerprint, then the waiting 3g runs.

The dev cluster plays Nomad and the node (its model of `node mig apply` and of the fingerprint delay);
the controller talks to it only over the HTTP API, as it would to a real cluster. Judged by the
cluster's audit: nothing running was touched (`mig_destroyed_in_use` 0, the tenants' allocations keep
their instances), and the waiting 3g job runs on the instance the re-layout made.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.migplanner import MigAsk
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.nomad.migdecode import decode_mig_placements as decode_placements
from nomad_gpu.service.relayout.controller import Phase, RelayoutController, RelayoutSettings
from nomad_gpu.service.relayout.port import NomadRelayoutPort, opted_in_gpus

pytestmark = pytest.mark.e2e

SPEED = 100.0
LAYOUT = ["3g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
MIG3G = "nvidia/gpu/NVIDIA H100 80GB HBM3 MIG 3g.40gb"
MIG1G = "nvidia/gpu/NVIDIA H100 80GB HBM3 MIG 1g.10gb"
SPEC: dict[str, Any] = {"name": "mig-relayout", "nodes": [{
    "name": "h100-mig-1", "device_plugin": "nomad-gpu", "meta": {"nomad_gpu_mig_relayout": "true"},
    "cpu_shares": 16000, "memory_mb": 65536,
    "gpus": [{"model": "NVIDIA H100 80GB HBM3", "count": 2, "memory_mib": 81920, "mig": LAYOUT}]}]}


def job(job_id: str, device: str, pin: str | None = None, duration: float = 1e6) -> str:
    constraint = (f'          constraint {{\n            attribute = "${{device.ids}}"\n'
                  f'            operator = "set_contains_any"\n'
                  f'            value = "{pin}"\n          }}\n') if pin else ""
    return (f'job "{job_id}" {{\n  type = "batch"\n  datacenters = ["dc1"]\n'
            f'  meta {{\n    nomad_gpu_dev_duration_s = "{duration}"\n  }}\n'
            f'  group "main" {{\n    reschedule {{\n      attempts = 0\n      unlimited = false\n    }}\n'
            f'    task "work" {{\n      driver = "docker"\n      config {{\n        image = "busybox:1"\n      }}\n'
            f'      resources {{\n        cpu = 500\n        memory = 512\n'
            f'        device "{device}" {{\n          count = 1\n{constraint}        }}\n      }}\n    }}\n  }}\n}}\n')


def submit(client: NomadClient, hcl: str) -> None:
    client.register(client.parse(hcl), hcl)


def allocs(dc: DevCluster, job_id: str) -> list[dict[str, Any]]:
    return [a for a in dc.audit()["allocations"] if a["job_id"] == job_id]


def wait(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_waiting_3g_runs_after_the_idle_gpu_is_relaid_and_nothing_running_is_touched() -> None:
    dc = DevCluster(SPEC, speed=SPEED)
    dc.start()
    try:
        client = NomadClient(NomadSettings(address=dc.url, timeout_s=5))
        with dc.state.lock:
            (node,) = dc.state.nodes.values()
            ids = {g.uuid: {str(i): i.id for i in g.instances} for g in node.mig_gpus}
        g0, g1 = sorted(ids)
        tenants = {"t-3g-a": (MIG3G, ids[g0]["3g.40gb@0"]), "t-3g-b": (MIG3G, ids[g1]["3g.40gb@0"]),
                   "t-1g-a": (MIG1G, ids[g0]["1g.10gb@4"])}
        for name, (device, pin) in tenants.items():
            submit(client, job(name, device, pin))
        wait(lambda: all(a["client_status"] == "running" for t in tenants for a in allocs(dc, t))
             and all(allocs(dc, t) for t in tenants))
        # Before: a 3g job waits, however long (here 30 s of cluster time): no idle 3g exists.
        submit(client, job("waiting-3g", MIG3G, duration=5.0))
        time.sleep(30 / SPEED)
        assert allocs(dc, "waiting-3g") == []
        # The controller plans from Nomad's view and runs the apply job through Nomad.
        ctl = RelayoutController(NomadRelayoutPort(client), RelayoutSettings(fingerprint_timeout_s=5.0),
                                 load=lambda: None, save=lambda _: None)
        started_at = time.monotonic()

        def step() -> list[Any]:
            gpus = opted_in_gpus([client.node(n["ID"]) for n in client.nodes()], client.allocations())
            return ctl.step(time.monotonic(), gpus, [MigAsk("waiting-3g", "3g.40gb")] if not ctl.records else [])

        (record,) = step()
        assert record.gpu == g1 and record.layout == "3g.40gb@0,3g.40gb@4"  # never GPU 0: its 1g@4 is busy
        wait(lambda: step() is not None and ctl.records[-1].phase.is_terminal())
        assert ctl.records[-1].phase is Phase.DONE, ctl.records[-1].reason
        ran = wait(lambda: [a for a in allocs(dc, "waiting-3g") if a["client_status"] in ("running", "complete")])
        elapsed = time.monotonic() - started_at
        audit = dc.audit()
        assert audit["mig_destroyed_in_use"] == 0 and len(audit["mig_changes"]) == 1
        new_3g = {i.id for g in dc.state.nodes[node.id].mig_gpus for i in g.instances} - {
            v for per in ids.values() for v in per.values()}
        assert ran[0]["device_ids"] == sorted(new_3g) or ran[0]["device_ids"] == list(new_3g)
        for name, (_, pin) in tenants.items():  # the tenants run on, on the same instances
            (a,) = allocs(dc, name)
            assert a["client_status"] == "running" and a["device_ids"] == [pin]
        print(f"\nwaiting 3g placed {elapsed * SPEED:.1f} cluster-seconds after the re-layout started "
              f"(speed {SPEED:g}; fingerprint delay 20 s)")
    finally:
        dc.stop()


def _start(spec: dict[str, Any] = SPEC) -> tuple[DevCluster, NomadClient, dict[str, dict[str, str]]]:
    dc = DevCluster(spec, speed=SPEED)
    dc.start()
    client = NomadClient(NomadSettings(address=dc.url, timeout_s=5))
    with dc.state.lock:
        (node,) = dc.state.nodes.values()
        ids = {g.uuid: {str(i): i.id for i in g.instances} for g in node.mig_gpus}
    return dc, client, ids


def test_a_foreign_job_on_an_idle_instance_between_plan_and_apply_makes_the_apply_refuse() -> None:
    dc, client, ids = _start()
    try:
        g0, g1 = sorted(ids)
        for name, (device, pin) in {"t-a": (MIG3G, ids[g0]["3g.40gb@0"]), "t-b": (MIG3G, ids[g1]["3g.40gb@0"]),
                                    "t-c": (MIG1G, ids[g0]["1g.10gb@4"])}.items():
            submit(client, job(name, device, pin))
        wait(lambda: sum(a["client_status"] == "running" for a in dc.audit()["allocations"]) == 3)
        planned_view = opted_in_gpus([client.node(n["ID"]) for n in client.nodes()], client.allocations())
        # Between the plan and the apply, someone else's job takes one of the idle 1g the plan destroys.
        submit(client, job("foreign", MIG1G, ids[g1]["1g.10gb@5"]))
        wait(lambda: [a for a in allocs(dc, "foreign") if a["client_status"] == "running"])
        ctl = RelayoutController(NomadRelayoutPort(client), RelayoutSettings(), load=lambda: None, save=lambda _: None)
        (record,) = ctl.step(time.monotonic(), planned_view, [MigAsk("waiting-3g", "3g.40gb")])
        assert ids[g1]["1g.10gb@5"] in record.expect_idle
        wait(lambda: ctl.step(time.monotonic(), [], []) is not None and ctl.records[-1].phase.is_terminal())
        assert ctl.records[-1].phase is Phase.FAILED and "apply job failed" in ctl.records[-1].reason
        audit = dc.audit()
        assert audit["mig_changes"] == [] and audit["mig_destroyed_in_use"] == 0
        assert [a["client_status"] for a in allocs(dc, "foreign")] == ["running"]
    finally:
        dc.stop()


def test_a_node_down_mid_relayout_is_rolled_back() -> None:
    from nomad_gpu.devcluster import nodeops
    slow = {**SPEC, "nodes": [{**SPEC["nodes"][0], "mig_fingerprint_delay_s": 1000.0}]}
    dc, client, ids = _start(slow)
    try:
        g0, g1 = sorted(ids)
        for name, pin in {"t-a": ids[g0]["3g.40gb@0"], "t-b": ids[g1]["3g.40gb@0"]}.items():
            submit(client, job(name, MIG3G, pin))
        wait(lambda: sum(a["client_status"] == "running" for a in dc.audit()["allocations"]) == 2)
        ctl = RelayoutController(NomadRelayoutPort(client), RelayoutSettings(), load=lambda: None, save=lambda _: None)
        view = opted_in_gpus([client.node(n["ID"]) for n in client.nodes()], client.allocations())
        (record,) = ctl.step(time.monotonic(), view, [MigAsk("waiting-3g", "3g.40gb")])
        wait(lambda: dc.audit()["mig_changes"])  # applied on the node; Nomad would see it only much later
        nodeops.set_status(dc.state, "h100-mig-1", "down")
        wait(lambda: ctl.step(time.monotonic(), [], []) is not None and ctl.records[-1].phase.is_terminal())
        assert ctl.records[-1].phase is Phase.FAILED and "node down" in ctl.records[-1].reason
        assert dc.audit()["mig_destroyed_in_use"] == 0
        nodeops.set_status(dc.state, "h100-mig-1", "ready")  # back up: its plugin reports the GPUs as they are
        (node_id,) = dc.node_ids().values()
        got = {p.gpu: p for p in decode_placements(client.node(node_id)).values() if p.start == 4}
        assert got[record.gpu].profile == "3g.40gb"
    finally:
        dc.stop()
