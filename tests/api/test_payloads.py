"""The API's payloads: each round-trips through JSON, reads leniently, refuses a wrong type by its path,
and gives the schema the OpenAPI document shows."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from nomad_gpu.api import payloads
from nomad_gpu.api.codec import UNSET, json_schema
from nomad_gpu.api.payloads import (
    Allocation,
    Allocations,
    Entries,
    Entry,
    ErrorReply,
    GpuView,
    Hcl,
    History,
    Holder,
    Inventory,
    Kept,
    MigGpu,
    MigRelayoutView,
    MigView,
    Minute,
    NodeView,
    Patch,
    Payload,
    Placement,
    Status,
    Sweep,
    SweepRow,
    Sweeps,
    TeamRow,
    Teams,
    Usage,
    UsageReport,
    UsageRow,
    Whoami,
)
from nomad_gpu.domain.errors import UnreadableReply

PLACEMENT = Placement("main", 0, "n1", 1000, 1024, ("GPU-1", "GPU-2"), "NVIDIA A100", 0, 2.0, None)
USAGE = Usage(87.5, 40960.0, 81920.0, False, 0, None, 1000.0)
ENTRY = Entry("q000001", "train", "vision", 50, "running", 900.0, 1, 2, "", "ngpu-q000001-1", (PLACEMENT,), 905.0,
              None, "lr-1", {"name": "train", "groups": [{"name": "main"}]}, "default", 906.0, 0, False, USAGE)
HOLDER = Holder("q000001", "vision", 1000)
MIG = MigView("MIG-a", "NVIDIA H100 MIG 3g.40gb", True, "3g.40gb", False, (HOLDER,), "00000000:47:00.0", 3)
NODE = NodeView("n1", "gpu-01", "dc1", "ready", True, 64000, 512000, 60000, 500000, False, True, "default",
                (GpuView("GPU-1", "NVIDIA A100", "whole", True, 0, (HOLDER,), "00000000:07:00.0"),), (MIG,),
                (MigGpu("00000000:47:00.0", "NVIDIA H100", 7, 3, 0, ("MIG-a",)),))
SAMPLES: list[Payload] = [
    ErrorReply("no queue entry 'q9'"), Patch(80), PLACEMENT, USAGE, ENTRY, dataclasses.replace(ENTRY, eta=None),
    dataclasses.replace(ENTRY, eta=1234.5, usage=None), Entries((ENTRY,)),
    Sweep("lr-1", 1, {"running": 1}, (ENTRY,)),
    Allocation("a1", "main", 0, "n1", "gpu-01", "running", "run", ("main",)),
    Allocations("q1", "ngpu-q1", "default", 900.0, 905.0, 906.0, None, 5.0, 10.0,
                (Allocation("a1", "main", 0, "n1", "gpu-01", "running", "run", ("main",)),), "http://n/ui/jobs/x@default"),
    Hcl("q1", "ngpu-q1", "default", 0, "hcl2", 'job "x" {}'), HOLDER, NODE.gpus[0], MIG, NODE.mig_gpus[0], NODE,
    Inventory((NODE,)),
    Status(True, 3, 1, 2, 1, 8, {"vision": 2.0}, {"q1": ["n1"]}, True, 0, "ab12cd", "http://nomad:4646"),
    TeamRow("vision", 2.0, 16.0, 2.0, 4.0, 1, 2), Teams(8.0, (TeamRow("vision", 2.0, None, None, 4.0, 1, 2),)),
    Minute(960, 1.5, 1, 2), History(60, 86400, 1000.0, (Minute(960, 1.5, 1, 2),)),
    SweepRow("lr-s1", "lr", "vision", 3, {"running": 1, "queued": 2}, 900.0),
    Sweeps((SweepRow("lr-s1", "lr", "vision", 3, {"queued": 3}, 900.0),)),
    UsageRow("vision", 12.5, 3, 4, 60.0, 120.0, 1),
    UsageReport(0.0, 86400.0, "team", (UsageRow("vision", 12.5, 3, 4, None, None, 0),)),
    MigRelayoutView(("3g.40gb@0", "3g.40gb@4"), ("3g.40gb@4",), ("MIG-b",), "applying", 900.0),
    dataclasses.replace(NODE.mig_gpus[0], uuid="GPU-9", relayout=MigRelayoutView(("7g.80gb@0",))),
    dataclasses.replace(MIG, gpu="GPU-9", start=0, memory_slices=4),
    Whoami("vision", False),
    dataclasses.replace(NODE, gpu_util_pct=64.0, gpu_util_devices=2),
    Kept("q000001", 1234.5),
    dataclasses.replace(USAGE, idle_for_s=1500.0, idle_warned=True, reclaim_in_s=300.0, kept_until=None,
                        idle_note="idle 25 min: will be stopped in 5 min if a job is waiting"),
    dataclasses.replace(UsageRow("vision", 12.5, 3, 4, 60.0, 120.0, 1), idle_gpu_hours=2.5, reclaimed_gpu_hours=1.0,
                        reclaims=1),
]


@pytest.mark.parametrize("payload", [pytest.param(p, id=type(p).__name__) for p in SAMPLES])
def test_each_payload_round_trips_through_json_text(payload: Payload) -> None:
    text = json.dumps(payload.to_json())
    assert type(payload).from_json(json.loads(text)) == payload


def test_every_payload_class_has_a_sample() -> None:
    classes = {c for c in vars(payloads).values()
               if isinstance(c, type) and dataclasses.is_dataclass(c) and issubclass(c, Payload)}
    assert classes == {type(p) for p in SAMPLES}


def test_a_field_left_unset_is_left_out_and_null_is_stated() -> None:
    assert "eta" not in ENTRY.to_json() and ENTRY.eta is UNSET
    assert dataclasses.replace(ENTRY, eta=None).to_json()["eta"] is None
    assert Entry.from_json({"id": "q1"}).eta is UNSET
    assert "nomad_address" not in Status().to_json()


def test_reading_is_lenient_about_fields_it_does_not_know_or_miss() -> None:
    """A CLI of one release reads another release's service: unknown keys ignored, missing ones defaulted."""
    read = Entry.from_json({"id": "q1", "state": "queued", "submitted_at": 5, "a_later_field": {"x": 1}})
    assert (read.id, read.submitted_at, read.placements, read.namespace, read.usage) == ("q1", 5.0, (), "default",
                                                                                         UNSET)
    assert isinstance(read.submitted_at, float)


@pytest.mark.parametrize(("cls", "data", "where"), [
    pytest.param(Entry, {"id": 7}, "Entry.id: expected str", id="scalar"),
    pytest.param(Entry, {"priority": True}, "Entry.priority: expected int", id="bool-is-not-int"),
    pytest.param(Entries, {"entries": [{"placements": [{"instance_ids": "GPU-1"}]}]},
                 "Entries.entries[0].placements[0].instance_ids: expected a list", id="nested"),
    pytest.param(Inventory, {"nodes": [{"gpus": [{"holders": [{"milli": "all"}]}]}]},
                 "Inventory.nodes[0].gpus[0].holders[0].milli: expected int", id="deep"),
    pytest.param(Status, [], "Status: expected an object", id="not-an-object"),
    pytest.param(Entry, {"usage": 3}, "Entry.usage: expected an object", id="optional-payload"),
])
def test_a_wrong_type_is_an_unreadable_reply_naming_its_path(cls: type[Payload], data: Any, where: str) -> None:
    with pytest.raises(UnreadableReply, match="^" + where.replace("[", r"\[").replace("]", r"\]")):
        cls.from_json(data)


def test_the_schema_follows_the_types() -> None:
    components: dict[str, Any] = {}
    assert json_schema(Entries, components) == {"$ref": "#/components/schemas/Entries"}
    assert set(components) == {"Entries", "Entry", "Placement", "Usage"}
    entry = components["Entry"]
    assert entry["properties"]["admitted_at"]["type"] == ["number", "null"]
    assert entry["properties"]["placements"] == {"type": "array", "items": {"$ref": "#/components/schemas/Placement"}}
    assert entry["properties"]["usage"]["anyOf"][1] == {"type": "null"}
    assert "eta" not in entry["required"] and "usage" not in entry["required"] and "id" in entry["required"]
    json_schema(ErrorReply, components)
    assert components["Error"]["required"] == ["error", "errors"]  # every refusal sends both


def test_json_field_names_are_the_stable_ones() -> None:
    """The names the CLI's --json and API clients rely on (add to them, never rename)."""
    assert set(ENTRY.to_json()) >= {"id", "name", "team", "priority", "state", "submitted_at", "attempts",
                                    "max_retries", "reason", "nomad_job_id", "placements", "admitted_at",
                                    "finished_at", "sweep", "spec", "namespace", "registered_at", "refusals",
                                    "held", "usage"}
    assert set(NODE.to_json()) >= {"id", "name", "datacenter", "status", "schedulable", "cpu_mhz", "memory_mb",
                                   "cpu_free", "memory_free", "draining", "eligible", "node_pool", "gpus", "migs"}
    assert set(PLACEMENT.to_json()) == {"group", "index", "node", "cpu_mhz", "memory_mb", "instance_ids",
                                        "device_name", "share_milli", "gpu_equivalents", "share_gpu", "link",
                                        "choice"}
