"""The plugin as Nomad meets it: a subprocess, the handshake, every RPC, Nomad's fingerprint rules, Shutdown.

Each plugin process reads a fake NVML node (the test-only NOMAD_GPU_DEVICE_FAKE_NVML variable). The 2 s
bound on Shutdown is Nomad's: past it the agent SIGKILLs the plugin and logs a failure.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from plugin_host import (
    STREAM_TIMEOUT_S,
    PluginProcess,
    health_check,
    open_stdio,
    plugin_command,
    plugin_env,
    start_plugin,
    validate_fingerprint,
)

from nomad_gpu.nvml.layouts import a800x8, h100_mig
from nomad_gpu.plugin.proto import base_pb2, device_pb2, health_pb2

pytestmark = pytest.mark.server  # a loopback server or the plugin as a subprocess, shared by the module

A800 = a800x8().with_ids()
UUIDS = [g.uuid for g in A800.gpus]
SHARED = {UUIDS[0]: 4, UUIDS[7]: 4}
MPS_PIPE = "/run/nomad-gpu/mps/{uuid}"


def groups_by_name(resp: device_pb2.FingerprintResponse) -> dict[tuple[str, str, str], list[str]]:
    return {(g.vendor, g.device_type, g.device_name): [d.ID for d in g.devices] for g in resp.device_group}


@pytest.fixture(scope="module")
def a800() -> Iterator[PluginProcess]:
    plugin = start_plugin("a800x8")
    plugin.set_config({"shared_gpus": SHARED, "mps_pipe_directory": MPS_PIPE, "fingerprint_period": "1s"})
    yield plugin
    plugin.close()


def test_handshake_is_the_first_line_and_has_no_mux_field(a800: PluginProcess) -> None:
    assert a800.handshake == f"1|2|unix|{a800.socket_path}|grpc"
    assert Path(a800.socket_path).is_socket()


def test_health_stdio_and_plugin_info(a800: PluginProcess) -> None:
    stdio = open_stdio(a800)
    assert health_check(a800) == health_pb2.HealthCheckResponse.SERVING
    info = a800.base.PluginInfo(base_pb2.PluginInfoRequest(), timeout=5)
    assert info.type == base_pb2.DEVICE and list(info.plugin_api_versions) == ["v0.1.0"]
    assert info.name == "nomad-gpu-device" and info.plugin_version.count(".") == 2
    schema = a800.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=5).spec
    assert "shared_gpus" in schema.object.attributes
    assert not stdio.done()  # the stdio stream stays open and silent
    stdio.cancel()


def test_unknown_health_service_is_not_found(a800: PluginProcess) -> None:
    with pytest.raises(grpc.RpcError) as err:
        a800.health.Check(health_pb2.HealthCheckRequest(service="other"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_eight_gpus_two_shared_by_four_fingerprint_six_whole_and_eight_shares(a800: PluginProcess) -> None:
    resp, stream = a800.first_fingerprint()
    assert validate_fingerprint(resp) == []
    groups = groups_by_name(resp)
    assert groups[("nvidia", "gpu", "NVIDIA A800-SXM4-80GB")] == UUIDS[1:7]
    shares = groups[("nomad-gpu", "shared-gpu", "NVIDIA A800-SXM4-80GB")]
    assert len(shares) == 8 and {s.rsplit("-share-", 1)[0] for s in shares} == {UUIDS[0], UUIDS[7]}
    assert all(d.healthy and d.hw_locality.pci_bus_id for g in resp.device_group for d in g.devices)
    shared_group = next(g for g in resp.device_group if g.vendor == "nomad-gpu")
    assert shared_group.attributes["slots"].int_val == 4 and shared_group.attributes["mps"].bool_val
    assert not stream.done()  # Nomad treats an ended fingerprint stream as "no devices until restart"
    stream.cancel()


def test_reserve_share_with_mps_and_unknown_ids(a800: PluginProcess) -> None:
    a800.first_fingerprint()[1].cancel()
    share_ids = [f"{UUIDS[7]}-share-0", f"{UUIDS[7]}-share-1"]
    res = a800.device.Reserve(device_pb2.ReserveRequest(device_ids=share_ids), timeout=5).container_res
    pipe = MPS_PIPE.format(uuid=UUIDS[7])
    assert dict(res.envs) == {"NVIDIA_VISIBLE_DEVICES": UUIDS[7], "CUDA_MPS_PIPE_DIRECTORY": pipe,
                              "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
                              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M"}
    assert [(m.task_path, m.host_path, m.read_only) for m in res.mounts] == [(pipe, pipe, False)]
    whole = a800.device.Reserve(device_pb2.ReserveRequest(device_ids=[UUIDS[3]]), timeout=5).container_res
    assert dict(whole.envs) == {"NVIDIA_VISIBLE_DEVICES": UUIDS[3]} and not whole.mounts
    with pytest.raises(grpc.RpcError) as err:
        a800.device.Reserve(device_pb2.ReserveRequest(device_ids=["GPU-nope", UUIDS[3]]), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device IDs: GPU-nope" in err.value.details()


def test_stats_are_keyed_by_advertised_ids(a800: PluginProcess) -> None:
    a800.first_fingerprint()[1].cancel()
    stream = a800.device.Stats(device_pb2.StatsRequest(), timeout=STREAM_TIMEOUT_S)
    first = next(stream)
    stream.cancel()
    keys = {k for g in first.groups for k in g.instance_stats}
    assert keys == set(UUIDS[1:7]) | {f"{u}-share-{k}" for u in (UUIDS[0], UUIDS[7]) for k in range(4)}
    busy_share = next(g for g in first.groups if g.vendor == "nomad-gpu").instance_stats[f"{UUIDS[0]}-share-2"]
    assert busy_share.stats.attributes["GPU utilization"].int_numerator_val.value == 97
    assert busy_share.stats.nested["processes"].attributes["4242"].int_numerator_val.value == 70112


def test_bad_config_is_refused_and_the_plugin_keeps_serving(a800: PluginProcess) -> None:
    with pytest.raises(grpc.RpcError) as err:
        a800.set_config({"fingerprint_period": "often"})
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "fingerprint_period" in err.value.details()
    assert health_check(a800) == health_pb2.HealthCheckResponse.SERVING


def test_logs_are_json_lines_nomad_can_level(a800: PluginProcess) -> None:
    records = a800.log_records()
    assert records and all({"@level", "@message", "@timestamp"} <= set(r) for r in records)
    assert {r["@level"] for r in records} <= {"trace", "debug", "info", "warn", "error"}


def test_mig_layout_one_instance_per_mig_device_with_its_profile() -> None:
    node = h100_mig().with_ids()
    plugin = start_plugin("h100-mig")
    try:
        plugin.set_config({})
        resp, stream = plugin.first_fingerprint()
        stream.cancel()
        assert validate_fingerprint(resp) == []
        groups = groups_by_name(resp)
        migs = {m.uuid: m.profile for m in node.gpus[0].migs}
        advertised = {i: name.rsplit(" MIG ", 1)[1] for (_, _, name), ids in groups.items() if " MIG " in name
                      for i in ids}
        assert advertised == migs
        assert groups[("nvidia", "gpu", "NVIDIA H100 80GB HBM3")] == [node.gpus[1].uuid]  # MIG parent left out
        assert plugin.shutdown() < 2.0
    finally:
        plugin.close()


def test_faults_in_the_layout_are_unhealthy_devices(tmp_path: Path) -> None:
    layout = tmp_path / "faulty.json"
    layout.write_text(json.dumps({"layout": "a800x8", "lost": [2], "xids": {"5": [79], "6": [13]}}))
    plugin = start_plugin(str(layout))
    try:
        plugin.set_config({})
        resp, stream = plugin.first_fingerprint()
        stream.cancel()
        assert validate_fingerprint(resp) == []
        health = {d.ID: (d.healthy, d.health_description) for g in resp.device_group for d in g.devices}
        assert health[UUIDS[2]][0] is False and "fell off the bus" in health[UUIDS[2]][1]
        assert health[UUIDS[5]] == (False, "XID 79 reported by NVML")
        assert health[UUIDS[6]] == (True, "")  # XID 13 is the application's fault, not the GPU's
    finally:
        plugin.close()


def test_no_driver_fingerprints_nothing_and_keeps_the_stream_open() -> None:
    plugin = start_plugin("no-driver")
    try:
        info = plugin.base.PluginInfo(base_pb2.PluginInfoRequest(), timeout=5)
        assert info.type == base_pb2.DEVICE  # NVML trouble never reaches PluginInfo/ConfigSchema/SetConfig
        plugin.set_config({})
        resp, stream = plugin.first_fingerprint()
        assert list(resp.device_group) == [] and not stream.done()
        stream.cancel()
    finally:
        plugin.close()


def test_shutdown_exits_within_nomads_two_seconds_with_streams_open() -> None:
    plugin = start_plugin("a800x8")
    try:
        plugin.set_config({"fingerprint_period": "1m"})  # a long period must not hold the exit
        stdio = open_stdio(plugin)
        _, fingerprint = plugin.first_fingerprint()
        stats = plugin.device.Stats(device_pb2.StatsRequest(), timeout=STREAM_TIMEOUT_S)
        next(stats)
        assert plugin.shutdown() < 2.0
        assert plugin.proc.returncode == 0
        assert not Path(plugin.socket_path).exists()
        for stream in (stdio, fingerprint, stats):
            stream.cancel()
    finally:
        plugin.close()


@pytest.mark.parametrize(("cookie", "env", "fragment"), [
    pytest.param(False, {}, "not meant to be run by hand", id="no-cookie"),
    pytest.param(False, {"NOMAD_PLUGIN_MAGIC_COOKIE": "wrong"}, "not meant to be run by hand", id="wrong-cookie"),
    pytest.param(True, {"PLUGIN_PROTOCOL_VERSIONS": "1"}, "protocol 2", id="wrong-protocol"),
    pytest.param(True, {"PLUGIN_CLIENT_CERT": "-----BEGIN CERTIFICATE-----"}, "AutoMTLS", id="automtls"),
])
def test_refuses_to_start_outside_nomad_with_exit_1(cookie: bool, env: dict[str, str], fragment: str) -> None:
    done = subprocess.run(plugin_command(), env=plugin_env("a800x8", cookie=cookie, extra=env), capture_output=True,
                          timeout=30, check=False)
    assert done.returncode == 1 and done.stdout == b""
    assert fragment in done.stderr.decode() and len(done.stderr.decode().strip().splitlines()) == 1
