"""The idle verdict: when a job is warned, when the action is due, what a keep postpones, the words shown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nomad_gpu.domain.idle import IdleAction, IdlePolicy, judge, reclaim_reason

STOP = IdlePolicy(after_s=1800, warn_after_s=1200, action=IdleAction.STOP)
MIN = 60.0


@pytest.mark.parametrize(
    ("policy", "idle_min", "kept_min", "warned", "due", "text"),
    [
        pytest.param(STOP, 10, None, False, False, "idle 10 min: will be stopped in 20 min if a job is waiting",
                     id="early"),
        pytest.param(STOP, 25, None, True, False, "idle 25 min: will be stopped in 5 min if a job is waiting",
                     id="warned"),
        pytest.param(STOP, 35, None, True, True, "idle 35 min: will be stopped when a job is waiting", id="due"),
        pytest.param(STOP, 35, 60, True, False,
                     "idle 35 min: kept 60 min more, then will be stopped if a job is waiting", id="kept"),
        pytest.param(IdlePolicy(after_s=1800, action=IdleAction.REQUEUE, only_when_waiting=False), 40, None, True,
                     True, "idle 40 min: being re-queued", id="requeue-always"),
        pytest.param(IdlePolicy(after_s=3600), 70, None, True, False, "idle 70 min", id="warn-only"),
    ],
)
def test_the_verdict(policy: IdlePolicy, idle_min: float, kept_min: float | None, warned: bool, due: bool,
                     text: str) -> None:
    now = 100_000.0
    kept = None if kept_min is None else now + kept_min * MIN
    verdict = judge(policy, now - idle_min * MIN, now, kept)
    assert verdict is not None
    assert (verdict.warned, verdict.due, verdict.text) == (warned, due, text)


def test_a_job_that_is_not_idle_has_no_verdict() -> None:
    assert judge(STOP, None, 5.0) is None


def test_the_stored_reason_names_the_beneficiary() -> None:
    assert reclaim_reason(1867.0, "q000042") == "idle 31 min: stopped for q000042"


@given(idle=st.floats(0, 7 * 86400), kept=st.one_of(st.none(), st.floats(0, 4 * 3600)))
def test_never_due_before_the_window_nor_while_kept(idle: float, kept: float | None) -> None:
    now = 1e6
    until = None if kept is None else now + kept
    verdict = judge(STOP, now - idle, now, until)
    assert verdict is not None
    free = until is None or until <= now
    assert verdict.due == (now - (now - idle) >= STOP.after_s and free)
    assert verdict.act_in_s is not None and verdict.act_in_s >= 0
    assert (verdict.act_in_s == 0) == verdict.due
