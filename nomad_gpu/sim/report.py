"""Packing results summarised the way the paper reports them, and paired with its published rows.

A `PackingSummary` holds one policy's per-seed curves (allocation % at each integer arrived %)
and their mean; `published_summary` reads the same shape from `published_allocation_ratio.csv`;
`paired` compares two policies seed by seed, which is the only comparison that means anything
when seed-to-seed spread (about 0.1 point for FGD) is as large as the effects being measured.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nomad_gpu.sim.packing import ARRIVED_MAX_PCT, SeedRun
from nomad_gpu.sim.trace import TraceError

PUBLISHED_NAMES: Mapping[str, str] = {"random": "01-Random", "best-fit": "05-BestFit", "fgd": "06-FGD"}
"""Our policy names for the paper's (`sc_policy` column of the published file)."""


@dataclass(frozen=True)
class PackingSummary:
    policy: str
    by_seed: Mapping[int, Sequence[float | None]]
    """Seed -> allocation % at arrived % 0..130 (None where the run had no event near that x)."""
    placed: Mapping[int, int] | None = None
    failed: Mapping[int, int] | None = None

    @property
    def seeds(self) -> list[int]:
        return sorted(self.by_seed)

    @property
    def mean(self) -> list[float | None]:
        out: list[float | None] = []
        for x in range(ARRIVED_MAX_PCT + 1):
            values = [v[x] for v in self.by_seed.values() if x < len(v) and v[x] is not None]
            out.append(round(statistics.fmean(v for v in values if v is not None), 2) if values else None)
        return out

    def only(self, seeds: Sequence[int]) -> PackingSummary:
        """The same summary over the given seeds (those it has)."""
        return PackingSummary(self.policy, {s: v for s, v in self.by_seed.items() if s in set(seeds)})

    def at(self, x: int) -> float | None:
        return self.mean[x]

    def seed_at(self, seed: int, x: int) -> float | None:
        curve = self.by_seed[seed]
        return curve[x] if x < len(curve) else None

    def unallocated_at(self, x: int = ARRIVED_MAX_PCT) -> float | None:
        value = self.at(x)
        return None if value is None else round(100.0 - value, 2)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "seeds": self.seeds,
            "arrived_pct": list(range(ARRIVED_MAX_PCT + 1)),
            "alloc_pct_mean": self.mean,
            "alloc_pct_by_seed": {str(s): list(self.by_seed[s]) for s in self.seeds},
            "alloc_pct_at_100": self.at(100),
            "alloc_pct_at_130": self.at(ARRIVED_MAX_PCT),
            "unallocated_pct_at_130": self.unallocated_at(),
        }
        if self.placed is not None and self.failed is not None:
            out["tasks_placed_by_seed"] = {str(s): self.placed[s] for s in self.seeds}
            out["tasks_failed_by_seed"] = {str(s): self.failed[s] for s in self.seeds}
        return out


def summarise(policy: str, runs: Sequence[SeedRun]) -> PackingSummary:
    return PackingSummary(policy, {r.seed: r.sampled() for r in runs}, {r.seed: r.placed for r in runs},
                          {r.seed: r.failed for r in runs})


@dataclass(frozen=True)
class Paired:
    """B minus A, seed by seed, at one arrived %: positive means B allocated more (left fewer idle)."""

    x: int
    diffs: Mapping[int, float]

    @property
    def mean(self) -> float:
        return round(statistics.fmean(self.diffs.values()), 3) if self.diffs else 0.0

    @property
    def wins(self) -> int:
        return sum(1 for d in self.diffs.values() if d > 0)

    @property
    def losses(self) -> int:
        return sum(1 for d in self.diffs.values() if d < 0)

    def to_json(self) -> dict[str, Any]:
        return {"arrived_pct": self.x, "mean_diff_points": self.mean, "wins": self.wins, "losses": self.losses,
                "ties": len(self.diffs) - self.wins - self.losses, "diff_by_seed": {str(s): d for s, d in
                                                                                  sorted(self.diffs.items())}}


def paired(a: PackingSummary, b: PackingSummary, x: int = ARRIVED_MAX_PCT) -> Paired:
    diffs: dict[int, float] = {}
    for seed in sorted(set(a.by_seed) & set(b.by_seed)):
        va, vb = a.seed_at(seed, x), b.seed_at(seed, x)
        if va is not None and vb is not None:
            diffs[seed] = round(vb - va, 2)
    return Paired(x, diffs)


def published_summary(path: Path, workload: str, policy: str) -> PackingSummary | None:
    """The paper's curves for `workload` (e.g. `openb_pod_list_default`) and one of our policy
    names, or None when the file has no such rows."""
    name = PUBLISHED_NAMES.get(policy)
    if name is None:
        return None
    by_seed: dict[int, list[float | None]] = {}
    try:
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row.get("workload") != workload or row.get("sc_policy") != name:
                    continue
                by_seed[int(row["seed"])] = [float(row[str(x)]) if row.get(str(x)) else None
                                             for x in range(ARRIVED_MAX_PCT + 1)]
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from exc
    except (KeyError, ValueError) as exc:
        raise TraceError(f"{path}: not a published allocation file ({exc})") from exc
    return PackingSummary(f"{policy} (published)", by_seed) if by_seed else None


@dataclass(frozen=True)
class Dominance:
    """B minus A on the mean curves over a range of arrived %: where B trails A most and leads most."""

    first: int
    last: int
    diffs: Mapping[int, float]
    """Arrived % -> mean of B minus mean of A, points (rounded to 0.01 as the means are)."""

    @property
    def worst(self) -> tuple[int, float]:
        x = min(self.diffs, key=lambda k: (self.diffs[k], k))
        return x, self.diffs[x]

    @property
    def best(self) -> tuple[int, float]:
        x = max(self.diffs, key=lambda k: (self.diffs[k], -k))
        return x, self.diffs[x]

    def holds(self, tolerance: float) -> bool:
        """B is never more than `tolerance` points below A over the range."""
        return self.worst[1] >= -tolerance

    def to_json(self) -> dict[str, Any]:
        return {"first_pct": self.first, "last_pct": self.last, "worst": list(self.worst), "best": list(self.best),
                "diff_by_pct": {str(x): d for x, d in sorted(self.diffs.items())}}


def dominance(a: PackingSummary, b: PackingSummary, first: int = 50, last: int = ARRIVED_MAX_PCT) -> Dominance:
    """Mean curve of `b` against `a` at every arrived % from `first` to `last` both have."""
    ma, mb = a.mean, b.mean
    diffs: dict[int, float] = {}
    for x in range(first, last + 1):
        va, vb = ma[x], mb[x]
        if va is not None and vb is not None:
            diffs[x] = round(vb - va, 2)
    return Dominance(first, last, diffs)
