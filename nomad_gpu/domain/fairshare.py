"""Fair share and quotas across teams, counted in GPU-equivalents (DESIGN 3.3).

A team's standing is its decayed past usage (GPU-eq seconds, halved every `half_life_s`, turned
back into GPU-eq by dividing by the half-life) plus what it holds right now, divided by its weight.
Lowest standing goes first. Counting what it holds now means fair share acts inside one cycle too:
a team that just got eight GPUs does not also get the next eight while others wait.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import Team
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.domain.units import split_mig_device_name


@dataclass(frozen=True)
class TeamPolicy:
    weight: float = 1.0
    quota_gpu: float | None = None
    """Cap on GPU-equivalents in use at once (the guaranteed, nominal share); None = no cap."""
    borrow_gpu: float = 0.0
    """How far past its quota the team may go on capacity its cohort lends (domain/cohorts.py)."""
    lend_gpu: float | None = None
    """How much of its unused quota the team lends to its cohort; None = all of it."""
    cohort: str | None = None
    """The teams that lend to each other; a team in none neither lends nor borrows."""

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise InvalidRequest("team weight must be > 0")
        if self.quota_gpu is not None and self.quota_gpu < 0:
            raise InvalidRequest("team quota must be >= 0")
        if self.borrow_gpu < 0 or (self.lend_gpu is not None and self.lend_gpu < 0):
            raise InvalidRequest("borrow_gpu and lend_gpu must be >= 0")
        if (self.borrow_gpu > 0 or self.lend_gpu is not None) and self.cohort is None:
            raise InvalidRequest("borrow_gpu and lend_gpu need a cohort: a team in none neither lends nor borrows")
        if self.cohort is not None and self.quota_gpu is None:
            raise InvalidRequest("a team in a cohort needs a quota_gpu: it lends and borrows against it")
        if self.lend_gpu is not None and self.quota_gpu is not None and self.lend_gpu > self.quota_gpu:
            raise InvalidRequest(f"lend_gpu {self.lend_gpu:g} is above quota_gpu {self.quota_gpu:g}: "
                                 "a team lends only its own unused quota")


@dataclass(frozen=True)
class FairShareConfig:
    half_life_s: float = 6 * 3600.0
    teams: Mapping[Team, TeamPolicy] = field(default_factory=dict)
    default: TeamPolicy = TeamPolicy()
    model_weights: Mapping[str, float] = field(default_factory=dict)
    """GPU-equivalents per GPU of a model (an H200 is not an A100); unlisted models weigh 1."""

    def team(self, team: Team) -> TeamPolicy:
        return self.teams.get(team, self.default)

    def weighted(self, placements: tuple[AllocPlacement, ...]) -> tuple[AllocPlacement, ...]:
        """Placements with their GPU-equivalents scaled by the weight of the model they landed on."""
        if not self.model_weights:
            return placements
        return tuple(replace(p, gpu_equivalents=p.gpu_equivalents * self.model_weights.get(_model(p), 1.0))
                     for p in placements)


def _model(p: AllocPlacement) -> str:
    name = p.device_name or ""
    split = split_mig_device_name(name)
    return split[0] if split else name


@dataclass(frozen=True)
class UsageHistory:
    """Decayed usage per team (GPU-eq seconds) as of a time. A value: `advance` returns a new one."""

    decayed: Mapping[Team, float] = field(default_factory=dict)
    as_of: float | None = None

    def advance(self, now: float, in_use: Mapping[Team, float], half_life_s: float) -> UsageHistory:
        """Decay to `now`, adding `in_use` as if held constantly since `as_of` (exact integral)."""
        if self.as_of is None or now <= self.as_of:
            return UsageHistory(dict(self.decayed), now if self.as_of is None else self.as_of)
        dt = now - self.as_of
        factor = 0.5 ** (dt / half_life_s)
        gain = half_life_s / math.log(2) * (1.0 - factor)
        teams = set(self.decayed) | set(in_use)
        out = {t: self.decayed.get(t, 0.0) * factor + in_use.get(t, 0.0) * gain for t in sorted(teams)}
        return UsageHistory({t: v for t, v in out.items() if v > 1e-9}, now)

    def standing(self, team: Team, in_use: float, config: FairShareConfig) -> float:
        past = self.decayed.get(team, 0.0) / config.half_life_s
        return (past + in_use) / config.team(team).weight
