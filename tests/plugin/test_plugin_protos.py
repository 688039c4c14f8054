"""The wire contract: service paths, field numbers and types as Nomad and go-plugin define them, and the
committed generated modules in step with the .proto files."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nomad_gpu.plugin.proto import (
    attribute_pb2,
    base_pb2,
    device_pb2,
    goplugin_pb2,
    hclspec_pb2,
    health_pb2,
    stats_pb2,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("module", "service", "methods"), [
    (base_pb2, "hashicorp.nomad.plugins.base.proto.BasePlugin", ["PluginInfo", "ConfigSchema", "SetConfig"]),
    (device_pb2, "hashicorp.nomad.plugins.device.DevicePlugin", ["Fingerprint", "Reserve", "Stats"]),
    (goplugin_pb2, "plugin.GRPCController", ["Shutdown"]),
    (goplugin_pb2, "plugin.GRPCStdio", ["StreamStdio"]),
    (health_pb2, "grpc.health.v1.Health", ["Check", "Watch"]),
])
def test_service_names_are_the_ones_the_host_dials(module: object, service: str, methods: list[str]) -> None:
    desc = module.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]]  # type: ignore[attr-defined]
    assert desc.full_name == service and [m.name for m in desc.methods] == methods


FIELDS: list[tuple[Any, dict[str, int]]] = [
    (base_pb2.PluginInfoResponse, {"type": 1, "plugin_api_versions": 2, "plugin_version": 3, "name": 4}),
    (base_pb2.SetConfigRequest, {"msgpack_config": 1, "nomad_config": 2, "plugin_api_version": 3}),
    (base_pb2.NomadDriverConfig, {"ClientMaxPort": 1, "ClientMinPort": 2}),
    (base_pb2.ConfigSchemaResponse, {"spec": 1}),
    (hclspec_pb2.Spec, {"object": 1, "array": 2, "Attr": 3, "block_value": 4, "block_attrs": 5, "block_list": 6,
                        "block_set": 7, "block_map": 8, "default": 9, "literal": 10}),
    (hclspec_pb2.Attr, {"name": 1, "type": 2, "required": 3}),
    (hclspec_pb2.Default, {"primary": 1, "default": 2}),
    (attribute_pb2.Attribute, {"float_val": 1, "int_val": 2, "string_val": 3, "bool_val": 4, "unit": 5}),
    (stats_pb2.StatObject, {"nested": 1, "attributes": 2}),
    (stats_pb2.StatValue, {"float_numerator_val": 1, "float_denominator_val": 2, "int_numerator_val": 3,
                           "int_denominator_val": 4, "string_val": 5, "bool_val": 6, "unit": 7, "desc": 8}),
    (device_pb2.FingerprintResponse, {"device_group": 1}),
    (device_pb2.DeviceGroup, {"vendor": 1, "device_type": 2, "device_name": 3, "devices": 4, "attributes": 5}),
    (device_pb2.DetectedDevice, {"ID": 1, "healthy": 2, "health_description": 3, "hw_locality": 4}),
    (device_pb2.DeviceLocality, {"pci_bus_id": 1}),
    (device_pb2.ReserveRequest, {"device_ids": 1}),
    (device_pb2.ContainerReservation, {"envs": 1, "mounts": 2, "devices": 3}),
    (device_pb2.Mount, {"task_path": 1, "host_path": 2, "read_only": 3}),
    (device_pb2.StatsRequest, {"collection_interval": 1}),
    (device_pb2.DeviceGroupStats, {"vendor": 1, "type": 2, "name": 3, "instance_stats": 4}),
    (device_pb2.DeviceStats, {"summary": 1, "stats": 2, "timestamp": 3}),
    (goplugin_pb2.StdioData, {"channel": 1, "data": 2}),
]


@pytest.mark.parametrize(("message", "numbers"), FIELDS, ids=[m.DESCRIPTOR.name for m, _ in FIELDS])
def test_field_numbers_match_the_contract(message: type, numbers: dict[str, int]) -> None:
    got = {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]
    assert got == numbers


def test_plugin_type_values() -> None:
    assert (base_pb2.UNKNOWN, base_pb2.DRIVER, base_pb2.DEVICE) == (0, 2, 3)


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools (dev extra) not installed")
@pytest.mark.server
def test_committed_modules_are_generated_from_the_committed_protos(tmp_path: Path) -> None:
    proto_dir = ROOT / "nomad_gpu" / "plugin" / "proto"
    copy = tmp_path / "nomad_gpu" / "plugin" / "proto"
    copy.mkdir(parents=True)
    for p in proto_dir.glob("*.proto"):
        (copy / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    script = (ROOT / "plugins" / "generate_protos.py").read_text(encoding="utf-8")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "generate_protos.py").write_text(script, encoding="utf-8")
    subprocess.run([sys.executable, str(tmp_path / "plugins" / "generate_protos.py")], check=True, timeout=120)
    fresh = {p.name: p.read_text(encoding="utf-8") for p in copy.glob("*_pb2*")}
    committed = {p.name: p.read_text(encoding="utf-8") for p in proto_dir.glob("*_pb2*")}
    assert fresh == committed
