"""The `teams:` and `default_team:` config: weights, quotas and cohorts (domain/cohorts.py).

Every key is checked at start, and an error names the team and the key: a misspelt `quota_gpu` once meant a
team silently without a quota, and a misspelt `cohort` would mean a team that never gets its lent capacity
back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import Team

TEAM_KEYS = ("weight", "quota_gpu", "borrow_gpu", "lend_gpu", "cohort")


def teams_from_mapping(raw: Any, where: str = "config") -> dict[Team, TeamPolicy]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: teams: must be a mapping of team name to its policy")
    teams = {Team(str(name)): team_from_mapping(body, f"{where}: teams: {name}") for name, body in raw.items()}
    for cohort in sorted({p.cohort for p in teams.values() if p.cohort is not None}):
        members = sorted(t for t, p in teams.items() if p.cohort == cohort)
        if len(members) < 2:
            raise InvalidRequest(f"{where}: teams: {members[0]}: cohort: {cohort!r} has no other team to lend to "
                                 "or borrow from")
    return teams


def team_from_mapping(raw: Any, where: str) -> TeamPolicy:
    if raw is None:
        return TeamPolicy()
    if not isinstance(raw, Mapping):
        raise InvalidRequest(f"{where}: must be a mapping with {', '.join(TEAM_KEYS)}")
    unknown = sorted(str(k) for k in set(raw) - set(TEAM_KEYS))
    if unknown:
        raise InvalidRequest(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(TEAM_KEYS)}")
    cohort = raw.get("cohort")
    if cohort is not None and (not isinstance(cohort, str) or not cohort.strip()):
        raise InvalidRequest(f"{where}: cohort: must be a name")
    weight = _number(raw, "weight", 1.0, where)
    try:
        return TeamPolicy(weight=1.0 if weight is None else weight,
                          quota_gpu=_number(raw, "quota_gpu", None, where),
                          borrow_gpu=_number(raw, "borrow_gpu", 0.0, where) or 0.0,
                          lend_gpu=_number(raw, "lend_gpu", None, where),
                          cohort=cohort)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}: {exc}") from None


def _number(raw: Mapping[str, Any], key: str, default: float | None, where: str) -> float | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")):
        raise InvalidRequest(f"{where}: {key}: must be a number, got {value!r}")
    return float(value)


def check_granted_teams(fair: FairShareConfig, granted: Iterable[str | None], where: str) -> None:
    """With cohorts configured, every team a token acts for must be one of `teams:`: a team missing there
    would have no quota, lend nothing and borrow nothing, which is never what an operator who set up
    cohorts meant (a typo in a token's team is the usual cause)."""
    if not any(p.cohort is not None for p in fair.teams.values()):
        return
    unknown = sorted({t for t in granted if t is not None and Team(t) not in fair.teams})
    if unknown:
        raise InvalidRequest(f"{where}: team(s) {', '.join(unknown)} not under teams: (with cohorts every "
                             "granted team needs its quota there)")
