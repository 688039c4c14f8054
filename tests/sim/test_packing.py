"""The packing experiment reproduces the paper's published curves point for point.

One seed per policy and trace keeps this quick; `benchmarks/packing_validation.py` runs all ten
(docs/packing.md has its output).
"""

from __future__ import annotations

import pytest

from nomad_gpu.sim.packing import SeedRun, run_seed, sample_percent
from nomad_gpu.sim.report import paired, published_summary, summarise
from nomad_gpu.sim.trace import PUBLISHED_CSV, Trace
from nomad_gpu.sim.workload import build_workload, typical_demand

pytestmark = pytest.mark.slow  # each test runs a whole packing simulation: not in `make check`


def test_workload_is_the_papers(openb_default: Trace) -> None:
    wl = build_workload(openb_default, 42)
    assert wl.originals == 8152 and len(wl.tasks) == 10866
    assert sorted(p.name for p in wl.tasks[:8152]) == sorted(p.name for p in openb_default.pods)
    assert sorted(wl.rank.values()) == list(range(1213))
    asked = sum(p.gpu_milli_total for p in wl.tasks)
    assert 1.29 * 6_212_000 < asked <= 1.3 * 6_212_000 + 8000
    assert build_workload(openb_default, 42) == wl


def test_typical_demand_has_the_papers_35_shapes(openb_default: Trace) -> None:
    demand = typical_demand(openb_default)
    assert len(demand.shapes) == 35
    assert abs(sum(p for _, p in demand.shapes) - 1.0) < 1e-9


@pytest.fixture(scope="module")
def fgd_42(openb_default: Trace) -> SeedRun:
    return run_seed(openb_default, "fgd", 42)


def test_fgd_reproduces_the_published_curve(fgd_42: SeedRun) -> None:
    published = published_summary(PUBLISHED_CSV, "openb_pod_list_default", "fgd")
    assert published is not None
    assert fgd_42.sampled() == list(published.by_seed[42])


def test_best_fit_reproduces_the_published_curve_on_shares(openb_share: Trace) -> None:
    published = published_summary(PUBLISHED_CSV, "openb_pod_list_gpushare100", "best-fit")
    assert published is not None
    assert run_seed(openb_share, "best-fit", 43).sampled() == list(published.by_seed[43])


@pytest.fixture(scope="module")
def frag_aware_42(openb_default: Trace) -> SeedRun:
    return run_seed(openb_default, "frag-aware", 42)


def test_frag_aware_leaves_fewer_gpus_idle_than_fgd_on_a_paired_seed(fgd_42: SeedRun, frag_aware_42: SeedRun) -> None:
    assert paired(summarise("fgd", [fgd_42]), summarise("frag-aware", [frag_aware_42])).wins == 1


def test_frag_aware_never_trails_fgd_over_the_curve(fgd_42: SeedRun, frag_aware_42: SeedRun) -> None:
    """From half load to saturation: the rare 8-GPU tasks that only the 128-core nodes can run
    used to fail from 43 % arrived on this seed (docs/packing.md)."""
    fgd, ours = fgd_42.sampled(), frag_aware_42.sampled()
    worst = min((ours[x] or 0.0) - (fgd[x] or 0.0) for x in range(50, 131))
    assert worst >= -0.05


@pytest.mark.parametrize(
    ("arrived", "used", "expected"),
    [
        # 10 GPUs, so 1 % is 100 milli: 0.5 % rounds (half to even) to 0, 1.5 % to 2
        pytest.param([40, 50, 150], [40, 50, 150], [0.45, 0.8, 1.5], id="half-to-even"),
        # nothing at 0 % or 2 %: the neighbours' mean stands in
        pytest.param([100, 100, 300], [100, 0, 300], [0.5, 0.5, 1.33, 3.0], id="fallback-to-neighbours"),
    ],
)
def test_sampling_follows_the_papers_script(arrived: list[int], used: list[int], expected: list[float | None]) -> None:
    assert sample_percent(arrived, used, 10, upto=len(expected) - 1) == expected
