"""The operator's `mig_relayout:` settings, and building the re-layout loop from them.

Off unless the operator turns it on: a re-layout runs a privileged command on nodes (docs/mig-relayout.md).
Which GPUs take part is the operator's choice twice over: a node opts in with its client meta
`nomad_gpu_mig_relayout = "true"`, or the service config lists nodes (ID or name) or GPUs (UUID).

    mig_relayout:
      enabled: true
      namespace: nomad-gpu-system     # where the apply jobs run (the ACL policy there allows raw_exec)
      driver: raw_exec
      command: /usr/local/bin/nomad-gpu
      nodes: [h100-mig-1]
      gpus: []
      cool_down_s: 600
      job_timeout_s: 300
      fingerprint_timeout_s: 120
      backoff_s: 60
      default_profiles: {"80GB (A100-80GB, H100-80GB)": ["1g.10gb"]}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nomad.client import NomadClient
from nomad_gpu.service.life.tracking import Executor
from nomad_gpu.service.relayout.applyjob import ApplyJobSettings
from nomad_gpu.service.relayout.controller import STORE_KEY, RelayoutController, RelayoutSettings
from nomad_gpu.service.relayout.loop import RelayoutLoop
from nomad_gpu.service.relayout.port import NomadRelayoutPort

_NUMBERS = ("cool_down_s", "job_timeout_s", "fingerprint_timeout_s", "backoff_s", "backoff_max_s", "admit_grace_s",
            "interval_s")


@dataclass(frozen=True)
class MigRelayoutConfig:
    enabled: bool = False
    nodes: frozenset[str] = frozenset()
    gpus: frozenset[str] = frozenset()
    interval_s: float = 5.0
    controller: RelayoutSettings = field(default_factory=RelayoutSettings)
    job: ApplyJobSettings = field(default_factory=ApplyJobSettings)


def mig_relayout_from_mapping(raw: Any, where: str = "config: mig_relayout") -> MigRelayoutConfig:
    if raw is None:
        return MigRelayoutConfig()
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping")
    known = {"enabled", "namespace", "driver", "command", "nodes", "gpus", "default_profiles", *_NUMBERS}
    unknown = sorted(set(map(str, raw)) - known)
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)}")
    numbers: dict[str, float] = {}
    for key in _NUMBERS:
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidRequest(f"{where}: {key}: must be a number of seconds, at least 0")
            numbers[key] = float(value)
    lists = {}
    for key in ("nodes", "gpus"):
        value = raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise InvalidRequest(f"{where}: {key}: must be a list of names")
        lists[key] = frozenset(value)
    defaults = raw.get("default_profiles") or {}
    if not isinstance(defaults, Mapping) or not all(
            isinstance(v, list) and all(isinstance(p, str) for p in v) for v in defaults.values()):
        raise InvalidRequest(f"{where}: default_profiles: must map a GPU family to a list of profiles")
    texts = {k: raw[k] for k in ("namespace", "driver", "command") if k in raw}
    if not all(isinstance(v, str) and v for v in texts.values()):
        raise InvalidRequest(f"{where}: namespace, driver and command must be non-empty strings")
    interval = numbers.pop("interval_s", 5.0)
    return MigRelayoutConfig(
        enabled=bool(raw.get("enabled", False)), nodes=lists["nodes"], gpus=lists["gpus"], interval_s=interval,
        controller=_controller(numbers, {str(k): tuple(v) for k, v in defaults.items()}),
        job=ApplyJobSettings(**texts))


def _controller(numbers: dict[str, float], defaults: dict[str, tuple[str, ...]]) -> RelayoutSettings:
    base = RelayoutSettings()
    return RelayoutSettings(
        cool_down_s=numbers.get("cool_down_s", base.cool_down_s),
        job_timeout_s=numbers.get("job_timeout_s", base.job_timeout_s),
        fingerprint_timeout_s=numbers.get("fingerprint_timeout_s", base.fingerprint_timeout_s),
        backoff_s=numbers.get("backoff_s", base.backoff_s),
        backoff_max_s=numbers.get("backoff_max_s", base.backoff_max_s),
        admit_grace_s=numbers.get("admit_grace_s", base.admit_grace_s), default_profiles=defaults)


def build_loop(config: MigRelayoutConfig, client: NomadClient, *, executor: Executor, clock: Callable[[], float],
               load: Callable[[], str | None], save: Callable[[str], None],
               wake: Callable[[], None]) -> RelayoutLoop | None:
    """The loop for a scheduler, or None when re-layouts are off."""
    if not config.enabled:
        return None
    controller = RelayoutController(NomadRelayoutPort(client, config.job), config.controller, load=load, save=save)
    return RelayoutLoop(controller, client, executor=executor, clock=clock, interval_s=config.interval_s,
                        extra_nodes=config.nodes, extra_gpus=config.gpus, wake=wake)


__all__ = ["STORE_KEY", "MigRelayoutConfig", "build_loop", "mig_relayout_from_mapping"]
