"""The words shown for a class's choice and for a class that waits."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.classes import DEFAULT_CLASS_POLICY, GIB, MIB, Size, WorkloadClass
from nomad_gpu.domain.classexplain import Choice, device_text, gib, wait_text

S, T, E = WorkloadClass.SERVING, WorkloadClass.TRAINING, WorkloadClass.EXPLORATORY


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        pytest.param(14 * GIB, "14 GiB", id="whole"),
        pytest.param(9984 * MIB, "9.75 GiB", id="quarter"),
        pytest.param(15 * 10**9, "13.97 GiB", id="15gb-rounded-up"),
        pytest.param(GIB + 1, "1.01 GiB", id="a-byte-over-never-shown-smaller"),
        pytest.param(20096 * MIB, "19.63 GiB", id="2g.20gb"),
    ],
)
def test_gib(amount: int, text: str) -> None:
    assert gib(amount) == text


def test_a_choice_says_what_where_why_and_which_tier() -> None:
    serving = Choice(S, Size(14 * GIB), "mig", device_text("mig", "NVIDIA H100 80GB HBM3", profile="3g.40gb"),
                     "h100-mig-1", 1)
    assert serving.text() == "serving -> MIG 3g.40gb on h100-mig-1: needs 14 GiB; isolated; tier 1"
    share = Choice(E, Size(10 * GIB), "share", device_text("share", "NVIDIA L40S", milli=250), "l40s-1", 1)
    assert share.text() == "exploratory -> share 250/1000 of NVIDIA L40S on l40s-1: needs 10 GiB; time-shared; tier 1"
    training = Choice(T, Size(None, 2), "gpu", device_text("gpu", "NVIDIA H100 80GB HBM3", count=2), "h100-1", 1)
    assert training.text() == "training -> 2 whole GPUs NVIDIA H100 80GB HBM3 on h100-1: any memory; isolated; tier 1"


@pytest.mark.parametrize(
    ("cls", "size", "fitting_free", "free", "in_fleet", "text"),
    [
        pytest.param(S, Size(14 * GIB), {}, {"share": 3}, {"mig": 4, "gpu": 2},
                     "serving: no isolated option with >= 14 GiB free; 3 shares free", id="the-issue's-example"),
        pytest.param(S, Size(14 * GIB), {}, {"mig": 5}, {"mig": 4},
                     "serving: no isolated option with >= 14 GiB free; 5 MIG instances too small", id="migs-too-small"),
        pytest.param(S, Size(100 * GIB), {}, {"gpu": 1}, {},
                     "serving: no isolated option with >= 100 GiB in the fleet; 1 whole GPU too small",
                     id="nothing-in-the-fleet-holds-it"),
        pytest.param(E, Size(10 * GIB), {"mig": 1}, {"mig": 1}, {"mig": 1, "share": 2},
                     "exploratory: 1 MIG instance with >= 10 GiB free, none placeable now",
                     id="free-but-not-placeable"),
        pytest.param(T, Size(None, 8), {}, {"mig": 7, "share": 2}, {"gpu": 16},
                     "training: no isolated option free; 2 shares, 7 MIG instances free", id="training-any-memory"),
    ],
)
def test_a_wait_says_why_no_tier_fits(cls: WorkloadClass, size: Size, fitting_free: dict[str, int],
                                      free: dict[str, int], in_fleet: dict[str, int], text: str) -> None:
    rule = DEFAULT_CLASS_POLICY.rule(cls)
    assert wait_text(cls, rule, size, fitting_free, free, in_fleet) == text  # type: ignore[arg-type]
