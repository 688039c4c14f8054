"""A GPU turns unhealthy mid-run (the project's plugin reports NVML health; the dev cluster's device fault,
devcluster/devicehealth.py). Nomad leaves the allocation on it running and places nothing new on it
("Skip unhealthy devices as they aren't allocatable", nomad/structs/devices.go v2.0.5). The service:
leaves the running entry alone and flags it, stops offering the GPU, shows it in the inventory, and
re-places an admitted entry pinned to it that Nomad refused. Judged by the dev cluster's audit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from harness import NOMAD_VERSIONS, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.devicehealth import placed_while_unhealthy
from nomad_gpu.render import JobSpec, RenderPlacement
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.store import QueueEntry
from nomad_gpu.store.entries import parse_job_id

TWO_GPUS: dict[str, Any] = {"name": "two", "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]}]}


def _entry(runtime: ServiceRuntime, entry_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{runtime.address}/v1/jobs/{entry_id}", timeout=5).json())


def _gpus(runtime: ServiceRuntime) -> dict[str, dict[str, Any]]:
    nodes = requests.get(f"{runtime.address}/v1/inventory", timeout=5).json()["nodes"]
    return {g["id"]: g for n in nodes for g in n["gpus"]}


@pytest.mark.e2e
def test_running_entry_is_flagged_and_left_alone_and_the_gpu_is_not_offered(tmp_path: Path) -> None:
    with DevCluster(TWO_GPUS, speed=20, heartbeat_s=1.0) as dc:
        runtime = start_service(dc.url, tmp_path / "q.db")
        try:
            (long,) = submit(runtime, spec("long", duration_s=400.0))
            wait_for(lambda: _entry(runtime, long["id"])["state"] == "running", what="the long job to run")
            (gpu,) = _entry(runtime, long["id"])["placements"][0]["instance_ids"]
            dc.device_unhealthy("n1", gpu, "XID 79: GPU has fallen off the bus")
            wait_for(lambda: bool(_entry(runtime, long["id"])["device_health"]), what="the entry's note")
            (note,) = _entry(runtime, long["id"])["device_health"]
            assert note.startswith(f"{gpu} unhealthy since ") and note.endswith(": XID 79: GPU has fallen off the bus")
            shown = _gpus(runtime)[gpu]
            assert (shown["healthy"], shown["health"]) == (False, "XID 79: GPU has fallen off the bus")
            assert shown["unhealthy_since"] is not None

            # two more one-GPU jobs: one takes the healthy GPU, the other waits; nothing lands on the sick one
            (a,) = submit(runtime, spec("a", duration_s=400.0))
            (b,) = submit(runtime, spec("b", duration_s=400.0))
            wait_for(lambda: _entry(runtime, a["id"])["state"] == "running", what="a to run on the healthy GPU")
            assert _entry(runtime, a["id"])["placements"][0]["instance_ids"] != [gpu]
            assert _entry(runtime, b["id"])["state"] == "queued"
            assert _entry(runtime, long["id"])["state"] == "running"
            audit = dc.audit()
            (alloc,) = [x for x in audit["allocations"] if x["job_id"] == long["nomad_job_id"]]
            assert (alloc["client_status"], alloc["desired_status"]) == ("running", "run"), "left alone"

            dc.device_healthy("n1", gpu)  # healthy again: offered again, the note goes
            wait_for(lambda: _gpus(runtime)[gpu]["healthy"] and not _entry(runtime, long["id"])["device_health"],
                     what="the GPU healthy again in the service")
            assert _gpus(runtime)[gpu]["unhealthy_since"] is None
        finally:
            runtime.stop()
        audit = dc.audit()
        assert placed_while_unhealthy(audit) == [] and overlaps(audit) == 0
        assert audit["double_bookings_refused"] == 0


@pytest.mark.e2e
@pytest.mark.parametrize("version", NOMAD_VERSIONS)
def test_admitted_entry_pinned_to_a_gpu_that_turns_unhealthy_is_placed_again(tmp_path: Path, version: str) -> None:
    """The GPU turns unhealthy between the service's decision and Nomad's plan: Nomad blocks the evaluation
    ("no devices match request" in FailedTGAllocs), and the service's refusal path re-queues the entry
    without using a retry; it then runs on the other GPU. Nomad before 1.11.1 places such a pin short, with
    no device (`createOffer`, scheduler/device.go v1.10.5): the service's pin check re-queues it so."""
    with DevCluster(TWO_GPUS, speed=20, heartbeat_s=1.0, nomad_version=version) as dc:
        # a refusal keeps the entry off the node for `refusal_avoid_s` (300 s by default); one node here
        runtime = start_service(dc.url, tmp_path / "q.db", refusal_avoid_s=1.0)
        sick: list[str] = []
        actuator = runtime.scheduler.actuator
        register = actuator.submit

        def fault_then_submit(entry: QueueEntry, job: JobSpec, placement: RenderPlacement) -> str:
            if not sick:  # the first admission's GPU fails just before the register reaches Nomad
                sick.append(placement.groups[0].device_ids[0])
                dc.device_unhealthy("n1", sick[0])
            return register(entry, job, placement)

        actuator.submit = fault_then_submit
        try:
            (entry,) = submit(runtime, spec("unlucky", duration_s=20.0))
            wait_for(lambda: _entry(runtime, entry["id"])["state"] == "complete", timeout_s=30,
                     what="the entry, placed again, to end")
            final = _entry(runtime, entry["id"])
            assert final["refusals"] == 1 and final["attempts"] == 1, "placed again, no retry used"
            history = runtime.scheduler.store.get(entry["id"]).history
            said = "no devices match request" if version >= "2" else "not 1 of its pins"
            assert any(said in str(h.get("reason")) for h in history), history
        finally:
            runtime.stop()
        audit = dc.audit()
        runs = [a for a in audit["allocations"] if (ref := parse_job_id(a["job_id"])) is not None
                and ref.entry == entry["id"]]
        assert runs[-1]["client_status"] == "complete" and len(runs) == (1 if version >= "2" else 2)
        assert all(sick[0] not in r["device_ids"] for r in runs)
        assert placed_while_unhealthy(audit) == [] and overlaps(audit) == 0
        assert audit["double_bookings_refused"] == 0
