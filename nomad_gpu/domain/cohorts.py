"""Cohorts: teams that lend their unused quota to each other and take it back on demand.

The model is Kueue's (apis/kueue/v1beta1 ClusterQueue: `nominalQuota`, `borrowingLimit`, `lendingLimit`,
cohorts): a team's `quota_gpu` is what it is guaranteed; with a `cohort` and a `borrow_gpu` it may run up to
`borrow_gpu` past its quota on what the other teams of its cohort leave unused and lend (`lend_gpu`, all of
the unused quota by default). What a team borrows is computed from what it holds now, never stored:
borrowed = in use - quota, when positive. A lender below its quota with work waiting takes its capacity
back from the borrowers (reclaim), never taking a borrower below its own quota.

Everything here is pure: a team's use comes in as a mapping, the policies as `FairShareConfig`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import EntryId, Team

EPS = 1e-9

BORROW_REQUIRES = ("preemptible", "any")
"""What may run past a team's quota: only preemptible work (so a lender can always take it back within the
victims' grace), or anything (a lender then waits for non-preemptible borrowed work to end)."""


@dataclass(frozen=True)
class Standing:
    """A team's place in its cohort now, in GPU-equivalents."""

    team: Team
    in_use: float
    quota: float | None
    borrowed: float
    """In use past the quota (0 for a team in no cohort, which cannot be past it)."""
    lendable: float
    """Unused quota it lends (at most `lend_gpu`)."""
    lent: float
    """The part of `lendable` that borrowers hold now (the cohort's borrowing, split among its lenders in
    proportion to what each lends)."""


def cohort_of(team: Team, fair: FairShareConfig) -> tuple[Team, ...]:
    """The teams of `team`'s cohort, itself included, sorted; just itself when it is in none."""
    name = fair.team(team).cohort
    if name is None:
        return (team,)
    members = _members(fair.teams).get(name, ())
    return members if team in members else tuple(sorted({*members, team}))


_MEMBERS: dict[int, tuple[Mapping[Team, TeamPolicy], dict[str, tuple[Team, ...]]]] = {}
"""Each configured teams mapping's cohorts, read once (the cycle asks for every waiting job of a cohort); the
mapping itself is kept beside its result, so an ID is never taken for another mapping's."""


def _members(teams: Mapping[Team, TeamPolicy]) -> dict[str, tuple[Team, ...]]:
    found = _MEMBERS.get(id(teams))
    if found is not None and found[0] is teams:
        return found[1]
    cohorts: dict[str, list[Team]] = {}
    for t, p in teams.items():
        if p.cohort is not None:
            cohorts.setdefault(p.cohort, []).append(t)
    out = {c: tuple(sorted(ts)) for c, ts in cohorts.items()}
    if len(_MEMBERS) > 64:  # configs are few (a reload makes one more): never grow without bound
        _MEMBERS.clear()
    _MEMBERS[id(teams)] = (teams, out)
    return out


def borrowed(team: Team, usage: Mapping[Team, float], fair: FairShareConfig) -> float:
    policy = fair.team(team)
    if policy.quota_gpu is None or policy.cohort is None:
        return 0.0
    return max(0.0, usage.get(team, 0.0) - policy.quota_gpu)


def lendable(team: Team, usage: Mapping[Team, float], fair: FairShareConfig) -> float:
    policy = fair.team(team)
    if policy.quota_gpu is None or policy.cohort is None:
        return 0.0
    unused = max(0.0, policy.quota_gpu - usage.get(team, 0.0))
    return unused if policy.lend_gpu is None else min(unused, policy.lend_gpu)


def standings(usage: Mapping[Team, float], fair: FairShareConfig, teams: Iterable[Team] = ()) -> dict[Team, Standing]:
    """Every named team's standing (the configured ones, those in use, and `teams`)."""
    names = sorted(set(fair.teams) | set(usage) | set(teams))
    out: dict[Team, Standing] = {}
    for t in names:
        members = cohort_of(t, fair)
        lend = lendable(t, usage, fair)
        pool = sum(lendable(m, usage, fair) for m in members)
        taken = sum(borrowed(m, usage, fair) for m in members)
        lent = min(lend, taken * lend / pool) if pool > EPS else 0.0
        out[t] = Standing(t, usage.get(t, 0.0), fair.team(t).quota_gpu, borrowed(t, usage, fair), lend, lent)
    return out


def quota_refusal(team: Team, need: float, usage: Mapping[Team, float], fair: FairShareConfig, *,
                  preemptible: bool, borrow_requires: str = "preemptible") -> str | None:
    """Why a job of `team` needing `need` GPU-equivalents may not start now for quota, or None when it may.

    Within the quota: always. Past it: only in a cohort, within `borrow_gpu`, preemptible work unless
    `borrow_requires` is `any`, and only while the other teams of the cohort lend what all of the cohort's
    borrowing would then come to."""
    policy = fair.team(team)
    quota = policy.quota_gpu
    in_use = usage.get(team, 0.0)
    if quota is None or in_use + need <= quota + EPS:
        return None
    held = f"team {team} holds {in_use:g} of {quota:g} GPU; needs {need:g}"
    if policy.cohort is None or policy.borrow_gpu <= EPS:
        return held
    if borrow_requires == "preemptible" and not preemptible:
        return f"{held}; only preemptible work may borrow past the quota"
    wants = in_use + need - quota
    if wants > policy.borrow_gpu + EPS:
        return f"{held}; it may borrow at most {policy.borrow_gpu:g} GPU in cohort {policy.cohort}"
    others = [t for t in cohort_of(team, fair) if t != team]
    free = sum(lendable(t, usage, fair) for t in others) - sum(borrowed(t, usage, fair) for t in others)
    if wants > free + EPS:
        lent = f"cohort {policy.cohort} lends {max(free, 0.0):g} GPU now"
        if in_use > quota + EPS:
            lent += f", {in_use - quota:g} of it to {team} already"
        return f"{held}; {lent}"
    return None


def room(team: Team, usage: Mapping[Team, float], fair: FairShareConfig, *, preemptible: bool,
         borrow_requires: str = "preemptible") -> float:
    """The most a new job of `team` may take now (`quota_refusal` refuses exactly the needs above it)."""
    policy = fair.team(team)
    if policy.quota_gpu is None:
        return float("inf")
    own = policy.quota_gpu - usage.get(team, 0.0)
    if policy.cohort is None or policy.borrow_gpu <= EPS or (borrow_requires == "preemptible" and not preemptible):
        return own
    others = [t for t in cohort_of(team, fair) if t != team]
    free = sum(lendable(t, usage, fair) for t in others) - sum(borrowed(t, usage, fair) for t in others)
    return max(own, own + min(policy.borrow_gpu, free))


@dataclass(frozen=True)
class Held:
    """A running attempt a lender may take back: a borrowing team's preemptible work."""

    entry: EntryId
    team: Team
    gpus: float
    started_at: float


def reclaim_victims(lender: Team, held: Sequence[Held], usage: Mapping[Team, float], fair: FairShareConfig,
                    fits: Callable[[frozenset[EntryId]], bool]) -> tuple[Held, ...] | None:
    """What to stop so the lender's waiting job fits: the borrowers' work, newest first, never taking a
    borrower below its quota (what each may lose is what it borrows); then pruned, so that dropping any one
    victim makes the job not fit. None when the borrowed work cannot make room."""
    cohort = set(cohort_of(lender, fair)) - {lender}
    room = {t: borrowed(t, usage, fair) for t in cohort}
    if fits(frozenset()):
        return ()
    order = sorted((h for h in held if h.team in cohort), key=lambda h: (-h.started_at, h.entry))
    chosen: list[Held] = []
    for h in order:
        if h.gpus > room[h.team] + EPS:
            continue
        room[h.team] -= h.gpus
        chosen.append(h)
        if fits(frozenset(c.entry for c in chosen)):
            break
    else:
        return None
    for h in list(reversed(chosen)):
        rest = [c for c in chosen if c is not h]
        if rest and fits(frozenset(c.entry for c in rest)):
            chosen = rest
    return tuple(sorted(chosen, key=lambda h: h.entry))


def borrowed_by_team(usage: Mapping[Team, float], fair: FairShareConfig) -> dict[str, float]:
    """The teams past their quota on lent capacity now, and by how much (the status's `team_borrowed_gpu`)."""
    out = {str(t): round(borrowed(t, usage, fair), 3) for t in sorted(usage)}
    return {t: v for t, v in out.items() if v > 0}


def cohort_quotas(fair: FairShareConfig) -> dict[str, float]:
    """The quota of every configured team in a cohort (the teams that can borrow)."""
    return {str(t): p.quota_gpu for t, p in fair.teams.items() if p.cohort is not None and p.quota_gpu is not None}
