"""The device block names the fingerprint's vendor (the real-Nomad issue, section 6), never an assumed one."""

from __future__ import annotations

from nomad_gpu.domain.ids import InstanceId, NodeId
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.render import parse_spec
from nomad_gpu.service.asks.translate import render_placement


def test_the_device_block_names_the_fingerprints_vendor() -> None:
    spec = parse_spec({"name": "a", "task": {"image": "i"}, "gpu": {"count": 1}})
    p = AllocPlacement("main", 0, NodeId("n1"), 100, 128, (InstanceId("GPU-m"),), "Instinct MI300X")
    assert render_placement(spec, [p]).groups[0].device_name == "nvidia/gpu/Instinct MI300X"  # type: ignore[arg-type]
    assert render_placement(spec, [p], vendor="amd").groups[0].device_name == "amd/gpu/Instinct MI300X"  # type: ignore[arg-type]
