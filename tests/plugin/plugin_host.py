"""Plays Nomad's part against the plugin process: go-plugin's start-up, handshake and the checks Nomad makes.

What it does mirrors what a Nomad client does with an external device plugin (reference: go-plugin's
client and Nomad's device manager, as described in the project's plugin notes): start the executable
with the magic cookie and the PLUGIN_* variables, read one handshake line from stdout, dial the Unix
socket, open StdioStream, then call the plugin's services. `validate_fingerprint` applies the rules the
device manager applies to every fingerprint before it accepts it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import grpc
import msgpack
from google.protobuf import empty_pb2

from nomad_gpu.plugin.proto import (
    base_pb2,
    base_pb2_grpc,
    device_pb2,
    device_pb2_grpc,
    goplugin_pb2,
    goplugin_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
)

COOKIE = ("NOMAD_PLUGIN_MAGIC_COOKIE", "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255")
HANDSHAKE_TIMEOUT_S = 30.0
STREAM_TIMEOUT_S = 120.0
"""A deadline on every stream a test opens: a plugin that never answers fails the test instead of hanging it."""
UNITS = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "kB", "KB", "MB", "GB", "TB", "PB", "EB"}
UNITS |= {u + "/s" for u in UNITS} | {"MHz", "GHz", "mW", "W", "kW", "MW", "GW"}
"""The units Nomad accepts on a device attribute (plugins/shared/structs units)."""


def plugin_env(fake_layout: str | None, cookie: bool = True, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != COOKIE[0]}
    env.update({"PLUGIN_MIN_PORT": "10000", "PLUGIN_MAX_PORT": "25000", "PLUGIN_PROTOCOL_VERSIONS": "2"})
    if cookie:
        env[COOKIE[0]] = COOKIE[1]
    if fake_layout is not None:
        env["NOMAD_GPU_DEVICE_FAKE_NVML"] = fake_layout
    env.update(extra or {})
    return env


def plugin_command() -> list[str]:
    return [sys.executable, "-m", "nomad_gpu.plugin.main"]


def cty_msgpack(config: Mapping[str, Any]) -> bytes:
    """Encode the way Nomad sends SetConfig: go-cty msgpack, an object as a map with sorted keys."""
    return msgpack.packb(dict(sorted(config.items())), use_bin_type=True)


def _reader(stream: IO[bytes], sink: queue.Queue[bytes | None]) -> None:
    for line in iter(stream.readline, b""):
        sink.put(line)
    sink.put(None)


@dataclass
class PluginProcess:
    proc: subprocess.Popen[bytes]
    handshake: str
    socket_path: str
    channel: grpc.Channel
    stderr_lines: list[bytes] = field(default_factory=list)

    @property
    def base(self) -> base_pb2_grpc.BasePluginStub:
        return base_pb2_grpc.BasePluginStub(self.channel)

    @property
    def device(self) -> device_pb2_grpc.DevicePluginStub:
        return device_pb2_grpc.DevicePluginStub(self.channel)

    @property
    def health(self) -> health_pb2_grpc.HealthStub:
        return health_pb2_grpc.HealthStub(self.channel)

    @property
    def controller(self) -> goplugin_pb2_grpc.GRPCControllerStub:
        return goplugin_pb2_grpc.GRPCControllerStub(self.channel)

    @property
    def stdio(self) -> goplugin_pb2_grpc.GRPCStdioStub:
        return goplugin_pb2_grpc.GRPCStdioStub(self.channel)

    def set_config(self, config: Mapping[str, Any]) -> None:
        self.base.SetConfig(base_pb2.SetConfigRequest(msgpack_config=cty_msgpack(config), plugin_api_version="v0.1.0",
                                                      nomad_config=base_pb2.NomadConfig(driver=base_pb2.NomadDriverConfig(
                                                          ClientMinPort=14000, ClientMaxPort=14512))), timeout=10)

    def first_fingerprint(self) -> tuple[device_pb2.FingerprintResponse, Any]:
        stream = self.device.Fingerprint(device_pb2.FingerprintRequest(), timeout=STREAM_TIMEOUT_S)
        return next(stream), stream

    def shutdown(self) -> float:
        """GRPCController.Shutdown, then the seconds until the process exited (Nomad waits 2 s, then kills)."""
        start = time.monotonic()
        self.controller.Shutdown(goplugin_pb2.Empty(), timeout=5)
        self.proc.wait(timeout=2.0)  # raises TimeoutExpired past Nomad's bound
        return time.monotonic() - start

    def close(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def log_records(self, at_least: int = 1, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The JSON log lines read from stderr so far (waiting, within a bound, for the reader thread)."""
        deadline = time.monotonic() + timeout_s
        while len(self.stderr_lines) < at_least and time.monotonic() < deadline:
            time.sleep(0.01)
        return [json.loads(line) for line in self.stderr_lines if line.strip().startswith(b"{")]


def start_plugin(fake_layout: str | None) -> PluginProcess:
    """Start the plugin as go-plugin does and connect; the handshake must be the first stdout line."""
    proc = subprocess.Popen(plugin_command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=plugin_env(fake_layout))
    assert proc.stdout is not None and proc.stderr is not None
    out: queue.Queue[bytes | None] = queue.Queue()
    err: queue.Queue[bytes | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, out), daemon=True).start()
    threading.Thread(target=_reader, args=(proc.stderr, err), daemon=True).start()
    try:
        first = out.get(timeout=HANDSHAKE_TIMEOUT_S)
    except queue.Empty:
        proc.kill()
        raise AssertionError("no handshake line within the start timeout") from None
    if first is None:
        proc.wait(timeout=5)
        raise AssertionError(f"plugin exited {proc.returncode} before the handshake: {_drain(err)!r}")
    line = first.decode().rstrip("\n")
    fields = line.split("|")
    assert len(fields) == 5, f"handshake must be core|app|network|address|protocol, got {line!r}"
    assert fields[:3] == ["1", "2", "unix"] and fields[4] == "grpc", line
    channel = grpc.insecure_channel(f"unix:{fields[3]}")
    grpc.channel_ready_future(channel).result(timeout=10)
    plugin = PluginProcess(proc, line, fields[3], channel)
    threading.Thread(target=_collect, args=(err, plugin.stderr_lines), daemon=True).start()
    return plugin


def _drain(q: queue.Queue[bytes | None]) -> bytes:
    chunks = []
    while True:
        try:
            item = q.get(timeout=1)
        except queue.Empty:
            break
        if item is None:
            break
        chunks.append(item)
    return b"".join(chunks)


def _collect(q: queue.Queue[bytes | None], sink: list[bytes]) -> None:
    while (item := q.get()) is not None:
        sink.append(item)


def validate_fingerprint(resp: device_pb2.FingerprintResponse) -> list[str]:
    """Nomad's checks on every device group of a fingerprint; an empty list means Nomad accepts it."""
    problems = []
    for g in resp.device_group:
        where = f"{g.vendor}/{g.device_type}/{g.device_name}"
        if not g.vendor or not g.device_type or not g.device_name:
            problems.append(f"{where}: vendor, type and name must be non-empty")
        for d in g.devices:
            if not d.ID:
                problems.append(f"{where}: a device without ID")
        for name, attr in g.attributes.items():
            kind = attr.WhichOneof("value")
            if kind is None:
                problems.append(f"{where}: attribute {name} has no value")
                continue
            if attr.unit and kind in ("string_val", "bool_val"):
                problems.append(f"{where}: attribute {name} has a unit on a {kind}")
            if attr.unit and attr.unit not in UNITS:
                problems.append(f"{where}: attribute {name} has unit {attr.unit!r}, not one of Nomad's")
    return problems


def health_check(plugin: PluginProcess) -> int:
    return plugin.health.Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=5).status


def open_stdio(plugin: PluginProcess) -> Any:
    return plugin.stdio.StreamStdio(empty_pb2.Empty(), timeout=STREAM_TIMEOUT_S)
