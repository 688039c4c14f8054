"""The gRPC services Nomad's plugin client calls: go-plugin's controller, stdio and health; BasePlugin; DevicePlugin.

Nomad's rules shape every method here (see docs/node.md):
- PluginInfo, ConfigSchema and SetConfig never touch NVML: an error from them stops the agent from starting.
- Fingerprint never ends and never errors (either clears the node's devices until the agent restarts):
  NVML trouble becomes unhealthy devices, and the stream sends whenever the device list changes.
- Stats never errors; Reserve refuses unknown IDs with INVALID_ARGUMENT.
- Shutdown wakes every long stream at once (they wait on events, not sleeps), so the process exits well
  inside the 2 s Nomad allows before SIGKILL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from nomad_gpu import __version__
from nomad_gpu.plugin import config as plugin_config
from nomad_gpu.plugin import wire
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
from nomad_gpu.plugin.reserve import ReserveError, reserve
from nomad_gpu.plugin.state import NodeState

logger = logging.getLogger(__name__)

PLUGIN_NAME = "nomad-gpu-device"
DEVICE_API_VERSION = "v0.1.0"
WORKERS = 32
"""Threads serving RPCs. Long-lived streams (stdio, fingerprint, stats, health watch) each hold one."""
STREAMS = 24
"""Long streams open at once at most (Nomad opens four); past it one is refused (RESOURCE_EXHAUSTED) at
once, so the other WORKERS - STREAMS threads are always free for Reserve, which must never wait."""
MAX_DETAIL_CHARS = 1024
"""A refusal's message at most: gRPC sends it as metadata, and a long one (3,000 echoed IDs) breaks the RPC."""


class Stopper:
    """One switch that ends the process and wakes every stream waiting on it."""

    def __init__(self, streams: int = STREAMS) -> None:
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._calls: set[threading.Event] = set()
        self._streams = streams

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()
            for ev in self._calls:
                ev.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def call(self, context: grpc.ServicerContext) -> threading.Event:
        """An event set when the plugin stops or this call's client goes away; a long stream past the
        `streams` open at once is refused here (RESOURCE_EXHAUSTED) before it holds a worker."""
        ev = threading.Event()
        with self._lock:
            full = len(self._calls) >= self._streams
            if not full:
                if self._stopped.is_set():
                    ev.set()
                self._calls.add(ev)
        if full:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self._streams} streams are open already")
        context.add_callback(ev.set)
        return ev

    def done(self, ev: threading.Event) -> None:
        with self._lock:
            self._calls.discard(ev)


class Controller(goplugin_pb2_grpc.GRPCControllerServicer):
    def __init__(self, stopper: Stopper) -> None:
        self._stopper = stopper

    def Shutdown(self, request: goplugin_pb2.Empty, context: grpc.ServicerContext) -> goplugin_pb2.Empty:
        logger.info("shutdown requested by the host")
        # Answer first; the main thread stops the server once the stopper fires.
        threading.Timer(0.05, self._stopper.stop).start()
        return goplugin_pb2.Empty()


class Stdio(goplugin_pb2_grpc.GRPCStdioServicer):
    """Kept open and silent: Nomad discards plugin stdio sent here, and logs stderr lines instead."""

    def __init__(self, stopper: Stopper) -> None:
        self._stopper = stopper

    def StreamStdio(self, request: Any, context: grpc.ServicerContext) -> Iterator[goplugin_pb2.StdioData]:
        ev = self._stopper.call(context)
        try:
            ev.wait()
        finally:
            self._stopper.done(ev)
        yield from ()


class Health(health_pb2_grpc.HealthServicer):
    SERVICES = ("", "plugin")

    def __init__(self, stopper: Stopper) -> None:
        self._stopper = stopper

    def Check(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> health_pb2.HealthCheckResponse:
        if request.service not in self.SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    def Watch(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> Iterator[health_pb2.HealthCheckResponse]:
        yield self.Check(request, context)
        ev = self._stopper.call(context)
        try:
            ev.wait()
        finally:
            self._stopper.done(ev)


class BasePlugin(base_pb2_grpc.BasePluginServicer):
    def __init__(self, state: NodeState) -> None:
        self._state = state

    def PluginInfo(self, request: base_pb2.PluginInfoRequest,
                   context: grpc.ServicerContext) -> base_pb2.PluginInfoResponse:
        return base_pb2.PluginInfoResponse(type=base_pb2.DEVICE, plugin_api_versions=[DEVICE_API_VERSION],
                                           plugin_version=__version__, name=PLUGIN_NAME)

    def ConfigSchema(self, request: base_pb2.ConfigSchemaRequest,
                     context: grpc.ServicerContext) -> base_pb2.ConfigSchemaResponse:
        return base_pb2.ConfigSchemaResponse(spec=plugin_config.config_schema())

    def SetConfig(self, request: base_pb2.SetConfigRequest,
                  context: grpc.ServicerContext) -> base_pb2.SetConfigResponse:
        try:
            cfg = plugin_config.decode_config(request.msgpack_config)
        except (plugin_config.ConfigError, ValueError, TypeError) as exc:  # a map keyed by a list: TypeError
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded(f"{PLUGIN_NAME}: config: {exc}"))
        self._state.configure(cfg)
        logger.info("configured: %d shared GPU(s), MPS %s", len(cfg.shared_gpus),
                    cfg.mps_pipe_directory or "off")
        return base_pb2.SetConfigResponse()


class DevicePlugin(device_pb2_grpc.DevicePluginServicer):
    def __init__(self, state: NodeState, stopper: Stopper, clock: Callable[[], float] = time.time) -> None:
        self._state, self._stopper, self._clock = state, stopper, clock

    def Fingerprint(self, request: device_pb2.FingerprintRequest,
                    context: grpc.ServicerContext) -> Iterator[device_pb2.FingerprintResponse]:
        ev = self._stopper.call(context)
        last: device_pb2.FingerprintResponse | None = None
        try:
            while not ev.is_set():
                try:
                    groups = self._state.refresh()
                    msg = wire.fingerprint(groups)
                except Exception:  # never end the stream: log it, keep what was sent, try again
                    logger.exception("fingerprint failed")
                    msg = None
                if msg is not None and msg != last:
                    self._state.publish(groups)
                    last = msg
                    yield msg
                ev.wait(self._state.config.fingerprint_period_s)
        finally:
            self._stopper.done(ev)

    def Reserve(self, request: device_pb2.ReserveRequest,
                context: grpc.ServicerContext) -> device_pb2.ReserveResponse:
        try:
            res = reserve(list(request.device_ids), self._state.published(), self._state.config)
        except ReserveError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded(str(exc)))
        logger.info("reserved %s -> %s", ",".join(request.device_ids), res.envs.get("NVIDIA_VISIBLE_DEVICES"))
        return wire.reservation(res)

    def Stats(self, request: device_pb2.StatsRequest,
              context: grpc.ServicerContext) -> Iterator[device_pb2.StatsResponse]:
        interval = request.collection_interval.ToNanoseconds() / 1e9 if request.HasField("collection_interval") \
            else 0.0
        interval = max(interval, 0.1) if interval > 0 else 1.0
        ev = self._stopper.call(context)
        try:
            while not ev.is_set():
                try:
                    groups, inventory = self._state.snapshot()
                    msg = wire.stats(groups, inventory, self._clock())
                except Exception:  # stats errors make Nomad back off and retry; skip a beat instead
                    logger.exception("stats failed")
                    msg = None
                if msg is not None:
                    yield msg
                ev.wait(interval)
        finally:
            self._stopper.done(ev)


def bounded(message: str) -> str:
    """``message`` cut to MAX_DETAIL_CHARS, saying how much was left out."""
    if len(message) <= MAX_DETAIL_CHARS:
        return message
    cut = MAX_DETAIL_CHARS - 40
    return f"{message[:cut]}... ({len(message) - cut} more characters)"


def build_server(state: NodeState, stopper: Stopper) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="plugin"))
    goplugin_pb2_grpc.add_GRPCControllerServicer_to_server(Controller(stopper), server)
    goplugin_pb2_grpc.add_GRPCStdioServicer_to_server(Stdio(stopper), server)
    health_pb2_grpc.add_HealthServicer_to_server(Health(stopper), server)
    base_pb2_grpc.add_BasePluginServicer_to_server(BasePlugin(state), server)
    device_pb2_grpc.add_DevicePluginServicer_to_server(DevicePlugin(state, stopper), server)
    return server
