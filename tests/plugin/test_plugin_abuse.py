"""The device plugin under a hostile or broken caller on its socket (issue 26, item 14): open Stats streams
must not starve Reserve (which Nomad calls as a task starts, with a deadline), a Reserve of thousands of
unknown IDs must not echo them all (gRPC's metadata limit turned the refusal into another error), and a
config map with a list for a key is INVALID_ARGUMENT (it was UNKNOWN)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import msgpack
import pytest
from plugin_host import STREAM_TIMEOUT_S, PluginProcess, start_plugin

from nomad_gpu.nvml.layouts import a800x8
from nomad_gpu.plugin.proto import base_pb2, device_pb2

pytestmark = pytest.mark.server

UUIDS = [g.uuid for g in a800x8().with_ids().gpus]


@pytest.fixture(scope="module")
def plugin() -> Iterator[PluginProcess]:
    p = start_plugin("a800x8")
    p.set_config({})
    yield p
    p.close()


def test_open_stats_streams_never_starve_reserve(plugin: PluginProcess) -> None:
    plugin.first_fingerprint()[1].cancel()
    streams = [plugin.device.Stats(device_pb2.StatsRequest(), timeout=STREAM_TIMEOUT_S) for _ in range(40)]
    try:
        for s in streams[:12]:
            next(s)  # these are being served, each holding what it holds
        res = plugin.device.Reserve(device_pb2.ReserveRequest(device_ids=[UUIDS[2]]), timeout=5).container_res
        assert dict(res.envs) == {"NVIDIA_VISIBLE_DEVICES": UUIDS[2]}
    finally:
        for s in streams:
            s.cancel()


def test_thousands_of_unknown_ids_are_refused_in_a_bounded_message(plugin: PluginProcess) -> None:
    ids = [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(3000)]
    with pytest.raises(grpc.RpcError) as err:
        plugin.device.Reserve(device_pb2.ReserveRequest(device_ids=ids), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert "unknown device IDs" in details and "more" in details and len(details) <= 2048


def test_a_config_map_with_a_list_key_is_invalid_argument(plugin: PluginProcess) -> None:
    payload = msgpack.packb({(1, 2): "x"}, use_bin_type=True)
    with pytest.raises(grpc.RpcError) as err:
        plugin.base.SetConfig(base_pb2.SetConfigRequest(msgpack_config=payload, plugin_api_version="v0.1.0"),
                              timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
