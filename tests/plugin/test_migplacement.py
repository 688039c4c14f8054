"""MIG placements travel from NVML through the plugin's fingerprint into Nomad's node JSON and back."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nomad_gpu.nomad.migdecode import decode_mig_placements, relayout_opted_in
from nomad_gpu.nvml import FakeNvml
from nomad_gpu.nvml.layouts import h100_mig
from nomad_gpu.plugin.config import PluginConfig
from nomad_gpu.plugin.proto import device_pb2
from nomad_gpu.plugin.state import NodeState
from nomad_gpu.plugin.wire import fingerprint


def node_json(msg: device_pb2.FingerprintResponse, meta: dict[str, str] | None = None) -> dict[str, Any]:
    """What a Nomad client makes of a fingerprint (`NodeDeviceResource`, attributes as
    `{Float, Int, String, Bool, Unit}`), as the servers then serve it."""
    groups = []
    for g in msg.device_group:
        attrs = {}
        for name, a in g.attributes.items():
            kind = a.WhichOneof("value")
            attrs[name] = {"Float": a.float_val if kind == "float_val" else None,
                           "Int": a.int_val if kind == "int_val" else None,
                           "String": a.string_val if kind == "string_val" else None,
                           "Bool": a.bool_val if kind == "bool_val" else None, "Unit": a.unit}
        groups.append({"Vendor": g.vendor, "Type": g.device_type, "Name": g.device_name, "Attributes": attrs,
                       "Instances": [{"ID": d.ID, "Healthy": d.healthy, "HealthDescription": d.health_description,
                                      "Locality": {"PciBusID": d.hw_locality.pci_bus_id}} for d in g.devices]})
    return {"ID": "node-1", "Meta": meta or {}, "NodeResources": {"Devices": groups}}


def test_each_mig_instance_carries_its_parent_gpu_and_placement() -> None:
    node = h100_mig().with_ids()
    state = NodeState(FakeNvml(node))
    state.configure(PluginConfig())
    raw = node_json(fingerprint(state.refresh()))
    got = decode_mig_placements(raw)
    parent = node.gpus[0]
    want = {m.uuid: (parent.uuid, m.profile, m.start, m.size) for m in parent.migs}
    assert {k: (p.gpu, p.profile, p.start, p.size) for k, p in got.items()} == want
    assert all(p.model == parent.name and p.healthy for p in got.values())
    # Small: one string attribute per instance, about 50 characters.
    values = [a["String"] for g in raw["NodeResources"]["Devices"] for n, a in g["Attributes"].items()
              if n.startswith("mig.")]
    assert len(values) == len(parent.migs) and max(map(len, values)) < 60


def test_an_instance_without_a_readable_placement_publishes_none() -> None:
    node = h100_mig().with_ids()
    # An unprivileged reader gets NoPermission for the GPU-instance query: no placement, no attribute.
    fake = FakeNvml(node)
    def refuse(*_: object) -> None:
        raise fake.NVMLError(4)
    fake.nvmlDeviceGetGpuInstanceById = refuse  # type: ignore[method-assign, assignment]
    state = NodeState(fake)
    state.configure(PluginConfig())
    assert decode_mig_placements(node_json(fingerprint(state.refresh()))) == {}


def test_stock_plugin_nodes_and_malformed_values_decode_to_no_placement() -> None:
    node = h100_mig().with_ids()
    state = NodeState(FakeNvml(node))
    state.configure(PluginConfig())
    raw = node_json(fingerprint(state.refresh()))
    group = next(g for g in raw["NodeResources"]["Devices"] if g["Name"].endswith("3g.40gb"))
    (iid,) = [i["ID"] for i in group["Instances"]]
    group["Attributes"]["mig." + iid]["String"] = "GPU-x@9"
    got = decode_mig_placements(raw)
    assert iid not in got and len(got) == len(node.gpus[0].migs) - 1
    for g in raw["NodeResources"]["Devices"]:
        g["Attributes"] = {k: v for k, v in g["Attributes"].items() if not k.startswith("mig.")}
    assert decode_mig_placements(raw) == {}


def test_relayout_is_opted_in_by_node_meta_only() -> None:
    empty = device_pb2.FingerprintResponse()
    assert relayout_opted_in(node_json(empty, {"nomad_gpu_mig_relayout": "true"}))
    assert relayout_opted_in(node_json(empty, {"nomad_gpu_mig_relayout": "True"}))
    assert not relayout_opted_in(node_json(empty, {"nomad_gpu_mig_relayout": "false"}))
    assert not relayout_opted_in(node_json(empty))
    assert not relayout_opted_in({"ID": "n", "Meta": None})


def test_placement_attributes_do_not_change_other_groups() -> None:
    node = h100_mig().with_ids()
    whole = replace(node, gpus=node.gpus[1:])
    state = NodeState(FakeNvml(whole))
    state.configure(PluginConfig())
    (group,) = state.refresh()
    assert not [n for n, _, _ in group.attributes if n.startswith("mig.")]
