"""The plugin's settings: the HCL schema Nomad validates the agent's `config {}` block against, and its decoding.

Nomad decodes the block with the schema from `ConfigSchema`, applies the defaults given there, and sends
the result as go-cty msgpack to `SetConfig` (an object becomes a map with sorted keys; a number becomes an
int when it is a whole int64, else a float). Every option therefore has a default in the schema, and the
decoder here still accepts a missing key, so a hand-written msgpack map works too. No NVML call happens
here: a failure in ConfigSchema or SetConfig stops the Nomad agent from starting.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from nomad_gpu.plugin.proto import hclspec_pb2 as hcl


class ConfigError(ValueError):
    """The agent's `config {}` block is wrong: SetConfig refuses it with this one line."""


@dataclass(frozen=True)
class PluginConfig:
    enabled: bool = True
    """False: fingerprint no devices at all (the stream stays open, as Nomad needs)."""
    fingerprint_period_s: float = 10.0
    """How often NVML is read for devices and health (XIDs, a GPU lost) between changes."""
    whole_gpus: bool = True
    """Advertise GPUs that are neither shared nor in MIG mode as `nvidia/gpu/<model>` (as the stock plugin)."""
    mig: bool = True
    """Advertise MIG devices as `nvidia/gpu/<model> MIG <profile>` (as the stock plugin)."""
    ignored_gpu_ids: frozenset[str] = frozenset()
    shared_gpus: Mapping[str, int] = field(default_factory=dict)
    """GPU UUID (or NVML index as a string) -> N slots: N share instances of that GPU."""
    mps_pipe_directory: str = ""
    """Where the operator's MPS control daemon listens; `{uuid}` and `{index}` name the GPU. Empty: no MPS."""
    mps_pinned_memory: bool = True
    """With MPS, also cap each share's device memory (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) to its slots."""

    def slots_for(self, uuid: str, index: int) -> int | None:
        return self.shared_gpus.get(uuid) or self.shared_gpus.get(str(index))


def _default(name: str, type_: str, literal: str) -> hcl.Spec:
    return hcl.Spec(default=hcl.Default(primary=hcl.Spec(Attr=hcl.Attr(name=name, type=type_, required=False)),
                                        default=hcl.Spec(literal=hcl.Literal(value=literal))))


def config_schema() -> hcl.Spec:
    """The `config {}` block Nomad accepts for this plugin, each option with its default."""
    return hcl.Spec(object=hcl.Object(attributes={
        "enabled": _default("enabled", "bool", "true"),
        "fingerprint_period": _default("fingerprint_period", "string", '"10s"'),
        "whole_gpus": _default("whole_gpus", "bool", "true"),
        "mig": _default("mig", "bool", "true"),
        "ignored_gpu_ids": _default("ignored_gpu_ids", "list(string)", "[]"),
        "shared_gpus": _default("shared_gpus", "map(number)", "{}"),
        "mps_pipe_directory": _default("mps_pipe_directory", "string", '""'),
        "mps_pinned_memory": _default("mps_pinned_memory", "bool", "true"),
    }))


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go's duration syntax (`"30s"`, `"1m30s"`, `"500ms"`), as the stock plugin's `fingerprint_period`."""
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ConfigError(f"fingerprint_period: {text!r} is not a duration like \"10s\" or \"1m\"")
    return total


def decode_config(payload: bytes) -> PluginConfig:
    """SetConfig's msgpack (empty bytes: all defaults) -> settings, or one clear ConfigError."""
    if not payload:
        return PluginConfig()
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ConfigError(f"config is not valid msgpack: {exc}") from exc
    if raw is None:
        return PluginConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be an object, got {type(raw).__name__}")
    return config_from_mapping(raw)


def config_from_mapping(raw: Mapping[str, Any]) -> PluginConfig:
    known = {"enabled", "fingerprint_period", "whole_gpus", "mig", "ignored_gpu_ids", "shared_gpus",
             "mps_pipe_directory", "mps_pinned_memory"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown config option(s): {', '.join(map(str, unknown))}")
    period = parse_duration(_str(raw, "fingerprint_period", "10s"))
    if period < 1.0:
        raise ConfigError("fingerprint_period must be at least 1s")
    ignored = raw.get("ignored_gpu_ids") or []
    if not isinstance(ignored, list) or not all(isinstance(x, str) for x in ignored):
        raise ConfigError("ignored_gpu_ids must be a list of GPU UUIDs")
    shared_raw = raw.get("shared_gpus") or {}
    if not isinstance(shared_raw, dict):
        raise ConfigError("shared_gpus must be a map of GPU UUID (or index) to a number of slots")
    shared: dict[str, int] = {}
    for key, value in shared_raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or value != int(value) or not 1 <= int(value) <= 48:
            raise ConfigError(f"shared_gpus[{key!r}]: slots must be a whole number from 1 to 48, got {value!r}")
        shared[str(key)] = int(value)
    overlap = sorted(set(shared) & set(ignored))
    if overlap:
        raise ConfigError(f"GPU(s) both ignored and shared: {', '.join(overlap)}")
    pipe = _str(raw, "mps_pipe_directory", "")
    if pipe and not pipe.startswith("/"):
        raise ConfigError("mps_pipe_directory must be an absolute path")
    try:
        pipe.format(uuid="GPU-x", index=0)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"mps_pipe_directory: only {{uuid}} and {{index}} may be substituted ({exc})") from exc
    return PluginConfig(enabled=_bool(raw, "enabled", True), fingerprint_period_s=period,
                        whole_gpus=_bool(raw, "whole_gpus", True), mig=_bool(raw, "mig", True),
                        ignored_gpu_ids=frozenset(ignored), shared_gpus=shared, mps_pipe_directory=pipe,
                        mps_pinned_memory=_bool(raw, "mps_pinned_memory", True))


def _str(raw: Mapping[str, Any], key: str, default: str) -> str:
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {value!r}")
    return value


def _bool(raw: Mapping[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return value
