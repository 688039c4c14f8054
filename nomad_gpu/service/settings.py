"""Service settings: grouped, built once at the entry point from flags, environment and a file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import Team
from nomad_gpu.domain.policies import DEFAULT_POLICY, POLICIES
from nomad_gpu.nomad.client import NomadSettings
from nomad_gpu.nomad.decode import NO_SHARING, ShareRule, SharingConfig

DEFAULT_ADDR = "http://127.0.0.1:4690"


@dataclass(frozen=True)
class SchedulingSettings:
    policy: str = DEFAULT_POLICY
    hol_threshold_s: float = 600.0
    tick_s: float = 5.0
    """A cycle runs on every event that frees or adds capacity, and at least this often."""
    fair: FairShareConfig = field(default_factory=FairShareConfig)
    sharing: SharingConfig = NO_SHARING
    actuator_workers: int = 8


@dataclass(frozen=True)
class ServiceSettings:
    nomad: NomadSettings = field(default_factory=NomadSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    db_path: str = "nomad-gpu.db"
    listen: str = DEFAULT_ADDR
    token: str | None = None
    templates_dir: Path | None = None

    def __repr__(self) -> str:
        return f"ServiceSettings(nomad={self.nomad!r}, db_path={self.db_path!r}, listen={self.listen!r})"


def load_scheduling(path: str | None) -> SchedulingSettings:
    """Read the optional YAML config (teams, sharing rules, policy); errors name the file and key."""
    if not path:
        return SchedulingSettings()
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise InvalidRequest(f"{path}: cannot read config ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise InvalidRequest(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{path}: the config must be a mapping")
    return scheduling_from_mapping(raw, where=path)


def scheduling_from_mapping(raw: Mapping[str, Any], where: str = "config") -> SchedulingSettings:
    known = {"policy", "hol_threshold_s", "tick_s", "half_life_s", "teams", "default_team", "sharing",
             "actuator_workers", "model_weights"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)}")
    policy = str(raw.get("policy", DEFAULT_POLICY))
    if policy not in POLICIES:
        raise InvalidRequest(f"{where}: policy: unknown {policy!r}; known: {', '.join(sorted(POLICIES))}")
    try:
        teams = {Team(str(k)): _team(v) for k, v in (raw.get("teams") or {}).items()}
        default = _team(raw.get("default_team") or {})
        rules = tuple(ShareRule(node=str(r.get("node", "")), model=str(r.get("model", "")),
                                gpu_id=str(r.get("gpu_id", "")), slots=r.get("slots"))
                      for r in raw.get("sharing") or [])
        return SchedulingSettings(
            policy=policy,
            hol_threshold_s=float(raw.get("hol_threshold_s", 600.0)),
            tick_s=float(raw.get("tick_s", 5.0)),
            fair=FairShareConfig(half_life_s=float(raw.get("half_life_s", 6 * 3600.0)), teams=teams, default=default,
                                 model_weights={str(k): float(v) for k, v in (raw.get("model_weights") or {}).items()}),
            sharing=SharingConfig(rules),
            actuator_workers=int(raw.get("actuator_workers", 8)),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidRequest(f"{where}: {exc}") from exc


def _team(raw: Any) -> TeamPolicy:
    if not isinstance(raw, Mapping):
        raise InvalidRequest("a team entry must be a mapping with weight / quota_gpu")
    quota = raw.get("quota_gpu")
    return TeamPolicy(weight=float(raw.get("weight", 1.0)), quota_gpu=None if quota is None else float(quota))
