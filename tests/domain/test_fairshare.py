"""UsageHistory decay math and team standings (fair share in GPU-equivalents)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy, UsageHistory
from nomad_gpu.domain.ids import Team

H = 3600.0
A, B = Team("a"), Team("b")


def exact(decayed: float, in_use: float, dt: float, h: float = H) -> float:
    """Closed form: old usage halves every h; a constant in_use adds its decayed integral."""
    return decayed * 2 ** (-dt / h) + in_use * h / math.log(2) * (1 - 2 ** (-dt / h))


@pytest.mark.parametrize(
    ("decayed", "in_use", "dt", "expected"),
    [
        pytest.param(1000.0, 0.0, H, 500.0, id="one-half-life-halves"),
        pytest.param(1000.0, 0.0, 2 * H, 250.0, id="two-half-lives-quarter"),
        pytest.param(0.0, 1.0, H, H / (2 * math.log(2)), id="one-gpu-for-a-half-life"),
        pytest.param(0.0, 8.0, 1.0, 8.0, id="short-interval-is-gpu-seconds"),
        pytest.param(100.0, 2.0, 600.0, exact(100.0, 2.0, 600.0), id="mixed"),
        pytest.param(0.0, 4.0, 1e9, 4.0 * H / math.log(2), id="steady-state"),
    ],
)
def test_advance_decays_and_integrates(decayed: float, in_use: float, dt: float, expected: float) -> None:
    h = UsageHistory({A: decayed} if decayed else {}, as_of=1000.0)
    got = h.advance(1000.0 + dt, {A: in_use} if in_use else {}, H)
    assert got.as_of == 1000.0 + dt
    assert got.decayed.get(A, 0.0) == pytest.approx(expected, rel=1e-3 if dt == 1.0 else 1e-9)


def test_first_advance_only_starts_the_clock() -> None:
    h = UsageHistory().advance(500.0, {A: 8.0}, H)
    assert h.as_of == 500.0 and dict(h.decayed) == {}


@pytest.mark.parametrize("now", [pytest.param(100.0, id="same-time"), pytest.param(50.0, id="clock-went-back")])
def test_no_time_no_change(now: float) -> None:
    h = UsageHistory({A: 10.0}, as_of=100.0)
    got = h.advance(now, {A: 8.0}, H)
    assert dict(got.decayed) == {A: 10.0} and got.as_of == 100.0


def test_negligible_usage_is_forgotten() -> None:
    got = UsageHistory({A: 1.0, B: 1e6}, as_of=0.0).advance(100 * H, {}, H)
    assert A not in got.decayed and B not in got.decayed
    got = UsageHistory({A: 1.0, B: 1e6}, as_of=0.0).advance(40 * H, {}, H)  # 2**-40 ~ 1e-12
    assert A not in got.decayed and got.decayed[B] == pytest.approx(1e6 * 2.0**-40)


def test_advance_is_a_value() -> None:
    h = UsageHistory({A: 10.0}, as_of=0.0)
    h.advance(H, {A: 1.0}, H)
    assert dict(h.decayed) == {A: 10.0} and h.as_of == 0.0


@settings(max_examples=60, deadline=None)
@given(
    start=st.floats(0, 1e6),
    d1=st.floats(0, 5 * H),
    d2=st.floats(0, 5 * H),
    used=st.floats(0, 64),
    past=st.floats(0, 1e6),
)
def test_advancing_in_two_steps_equals_one_step(start: float, d1: float, d2: float, used: float, past: float) -> None:
    h = UsageHistory({A: past} if past > 1e-9 else {}, as_of=start)
    two = h.advance(start + d1, {A: used}, H).advance(start + d1 + d2, {A: used}, H)
    one = h.advance(start + d1 + d2, {A: used}, H)
    assert two.decayed.get(A, 0.0) == pytest.approx(one.decayed.get(A, 0.0), rel=1e-9, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(dt=st.floats(1.0, 50 * H), used=st.floats(0.01, 64), past=st.floats(0, 1e7))
def test_usage_is_bounded_by_the_steady_state(dt: float, used: float, past: float) -> None:
    """Holding u GPUs forever converges to u * h / ln 2, from below or above, never past it."""
    steady = used * H / math.log(2)
    got = UsageHistory({A: past}, as_of=0.0).advance(dt, {A: used}, H).decayed.get(A, 0.0)
    assert min(past, steady) - 1e-6 <= got <= max(past, steady) + 1e-6


@pytest.mark.parametrize(
    ("decayed", "in_use", "weight", "expected"),
    [
        pytest.param(0.0, 0.0, 1.0, 0.0, id="idle"),
        pytest.param(2 * H, 0.0, 1.0, 2.0, id="past-only"),
        pytest.param(0.0, 3.0, 1.0, 3.0, id="now-only"),
        pytest.param(2 * H, 3.0, 1.0, 5.0, id="both"),
        pytest.param(2 * H, 2.0, 4.0, 1.0, id="weighted"),
    ],
)
def test_standing(decayed: float, in_use: float, weight: float, expected: float) -> None:
    cfg = FairShareConfig(half_life_s=H, teams={A: TeamPolicy(weight=weight)})
    assert UsageHistory({A: decayed}).standing(A, in_use, cfg) == pytest.approx(expected)


def test_unknown_team_gets_the_default_policy() -> None:
    cfg = FairShareConfig(half_life_s=H, default=TeamPolicy(weight=2.0, quota_gpu=4.0))
    assert cfg.team(Team("new")) == TeamPolicy(2.0, 4.0)
    assert UsageHistory().standing(Team("new"), 4.0, cfg) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "kwargs",
    [pytest.param({"weight": 0.0}, id="zero-weight"), pytest.param({"weight": -1.0}, id="negative-weight"),
     pytest.param({"quota_gpu": -0.5}, id="negative-quota")],
)
def test_bad_team_policy(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        TeamPolicy(**kwargs)
