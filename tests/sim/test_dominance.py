"""The dominance summary: where one policy's mean curve trails another's most, and leads most."""

from __future__ import annotations

from nomad_gpu.sim.packing import ARRIVED_MAX_PCT
from nomad_gpu.sim.report import PackingSummary, dominance


def curve(bumps: dict[int, float]) -> list[float | None]:
    return [float(x) + bumps.get(x, 0.0) for x in range(ARRIVED_MAX_PCT + 1)]


def test_worst_and_best_over_the_range_of_the_means() -> None:
    fgd = PackingSummary("fgd", {42: curve({}), 43: curve({})})
    ours = PackingSummary("frag-aware", {42: curve({40: -5.0, 90: -0.2, 130: 0.4}),
                                         43: curve({90: 0.0, 120: 0.6, 130: 0.2})})
    d = dominance(fgd, ours)
    assert d.worst == (90, -0.1)  # the mean of -0.2 and 0; 40 % is outside the range
    assert d.best == (120, 0.3)  # 130 % is +0.3 too: ties go to the lower arrived %
    assert not d.holds(0.05) and d.holds(0.1)
    assert d.to_json()["diff_by_pct"]["50"] == 0.0


def test_points_missing_from_either_curve_are_skipped() -> None:
    gap = curve({})
    gap[60] = None
    d = dominance(PackingSummary("fgd", {42: gap}), PackingSummary("frag-aware", {42: curve({})}))
    assert 60 not in d.diffs and len(d.diffs) == 80
