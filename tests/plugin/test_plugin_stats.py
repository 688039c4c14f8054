"""Stats per advertised instance: what NVML gives, keyed by share IDs for shares, absent never zero."""

from __future__ import annotations

from typing import Any

from nomad_gpu.nvml import FakeNvml
from nomad_gpu.nvml.fake import FakeNode
from nomad_gpu.nvml.layouts import a800x8, h100_mig
from nomad_gpu.plugin import wire
from nomad_gpu.plugin.config import PluginConfig
from nomad_gpu.plugin.devices import share_id
from nomad_gpu.plugin.state import NodeState


def stats_of(node: FakeNode, config: PluginConfig) -> dict[str, Any]:
    state = NodeState(FakeNvml(node))
    state.configure(config)
    state.refresh()
    groups, inventory = state.snapshot()
    msg = wire.stats(groups, inventory, 1_700_000_000.0)
    return {k: v for g in msg.groups for k, v in g.instance_stats.items()}


def test_whole_gpu_utilisation_and_memory_and_share_processes() -> None:
    node = a800x8().with_ids()
    uuids = [g.uuid for g in node.gpus]
    got = stats_of(node, PluginConfig(shared_gpus={"0": 2}))
    assert set(got) == set(uuids[1:]) | {share_id(uuids[0], 0), share_id(uuids[0], 1)}
    idle = got[uuids[1]]
    assert idle.stats.attributes["GPU utilization"].int_numerator_val.value == 0  # a real, measured zero
    assert idle.summary.desc == "GPU utilization"
    share = got[share_id(uuids[0], 1)]
    assert share.stats.attributes["GPU utilization"].int_numerator_val.value == 97
    mem = share.stats.attributes["Memory state"]
    assert (mem.int_numerator_val.value, mem.int_denominator_val.value, mem.unit) == (70116, 81920, "MiB")
    assert share.stats.nested["processes"].attributes["4242"].int_numerator_val.value == 70112
    assert share.timestamp.seconds == 1_700_000_000


def test_mig_devices_report_memory_but_no_utilisation() -> None:
    node = h100_mig().with_ids()
    got = stats_of(node, PluginConfig())
    mig = got[node.gpus[0].migs[3].uuid]
    assert set(mig.stats.attributes) == {"Memory state"}
    assert mig.stats.attributes["Memory state"].int_numerator_val.value == 30000
    assert mig.summary.desc == "Memory in use"
    assert "GPU utilization" in got[node.gpus[1].uuid].stats.attributes


def test_processes_without_memory_figures_are_left_out() -> None:
    node = h100_mig().with_ids()
    got = stats_of(node, PluginConfig(shared_gpus={"1": 2}))
    share = got[share_id(node.gpus[1].uuid, 0)]
    assert "processes" not in share.stats.nested  # GPU 1 lists no processes


def test_lost_gpu_has_no_stats_at_all() -> None:
    from dataclasses import replace

    node = a800x8().with_ids()
    gpus = list(node.gpus)
    gpus[2] = replace(gpus[2], lost=True)
    got = stats_of(replace(node, gpus=tuple(gpus)), PluginConfig())
    assert node.gpus[2].uuid not in got and len(got) == 7
