"""Placements of shares become render placements: the device plugin's share instances as a pinned
device, advisory shares (no plugin) as the GPU itself; stored placements keep which one they are."""

from __future__ import annotations

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.render import JobSpec, load_spec
from nomad_gpu.service.asks.translate import placement_from_json, placement_json, render_placement

SPEC = load_spec("name: nb\ntask: {image: i}\nshare: {milli: 500}\n")
assert isinstance(SPEC, JobSpec)
SLOTS = (InstanceId("GPU-a-share-2"), InstanceId("GPU-a-share-3"))
PLUGIN = AllocPlacement("main", 0, NodeId("n1"), 100, 256, SLOTS, "NVIDIA L40S", 500, 0.5,
                        share_gpu=InstanceId("GPU-a"))
ADVISORY = AllocPlacement("main", 0, NodeId("n1"), 100, 256, (InstanceId("GPU-b"),), "NVIDIA L40S", 500, 0.5)


def test_a_plugin_share_renders_as_its_share_instances() -> None:
    assert isinstance(SPEC, JobSpec)
    (group,) = render_placement(SPEC, [PLUGIN]).groups
    assert group.device_name == "nomad-gpu/shared-gpu/NVIDIA L40S"
    assert group.device_ids == SLOTS and (group.share_gpu, group.share_milli) == ("GPU-a", 500)


def test_an_advisory_share_renders_as_the_gpu() -> None:
    assert isinstance(SPEC, JobSpec)
    (group,) = render_placement(SPEC, [ADVISORY]).groups
    assert (group.device_name, group.device_ids, group.share_gpu) == (None, (), "GPU-b")


def test_stored_placements_round_trip_and_old_ones_read_as_advisory() -> None:
    assert placement_from_json(placement_json(PLUGIN)) == PLUGIN
    assert placement_from_json(placement_json(ADVISORY)) == ADVISORY
    old = placement_json(ADVISORY)
    del old["share_gpu"]
    assert placement_from_json(old) == ADVISORY and placement_from_json(old).shared_gpu == "GPU-b"
