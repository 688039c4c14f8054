"""`classes.<class>.idle`: the documented defaults, overrides, and one line naming the key for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.domain.classes import WorkloadClass
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.idle import IdleAction, IdlePolicy
from nomad_gpu.service.config.settings import load_config, scheduling_from_mapping

INT, EXP, HPO, TRAIN, SERVE = (WorkloadClass.INTERACTIVE, WorkloadClass.EXPLORATORY, WorkloadClass.HPO,
                               WorkloadClass.TRAINING, WorkloadClass.SERVING)


def test_the_defaults_are_the_documented_policy() -> None:
    idle = scheduling_from_mapping({}).idle
    assert idle[INT] == IdlePolicy(after_s=1800, warn_after_s=1200, action=IdleAction.STOP, only_when_waiting=True,
                                   max_keep_s=4 * 3600)
    for cls in (EXP, HPO):
        policy = idle[cls]
        assert policy is not None and policy.action is IdleAction.WARN
    assert idle[TRAIN] is None and idle[SERVE] is None


def test_a_class_gives_its_own_policy_and_the_others_keep_theirs(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("classes:\n"
                    "  interactive: {idle: {after: 45m, warn_after: 10m, action: requeue, only_when_waiting: false,"
                    " max_keep: 2h}}\n"
                    "  training: {idle: {after: 2h, action: warn}, default_count: 2}\n"
                    "  hpo: {idle: null}\n", encoding="utf-8")
    scheduling, _ = load_config(str(path))
    assert scheduling.idle[INT] == IdlePolicy(after_s=2700, warn_after_s=600, action=IdleAction.REQUEUE,
                                              only_when_waiting=False, max_keep_s=7200)
    assert scheduling.idle[TRAIN] == IdlePolicy(after_s=7200, action=IdleAction.WARN)
    assert scheduling.classes.rule(TRAIN).default_count == 2
    assert scheduling.idle[HPO] is None
    assert scheduling.idle[EXP] is not None


@pytest.mark.parametrize(
    ("idle", "message"),
    [
        pytest.param({"after": "-5m"}, "config: classes.interactive.idle.after: must be a duration", id="negative"),
        pytest.param({"after": 0}, "config: classes.interactive.idle.after: must be a duration", id="zero"),
        pytest.param({"after": "90d"}, "config: classes.interactive.idle.after: must be more than 0 and at most "
                     "7 days", id="absurd"),
        pytest.param({"after": "50s"}, "config: classes.interactive.idle.after: 50 s is shorter than two rounds of "
                     "usage.interval_s (30 s)", id="shorter-than-two-reads"),
        pytest.param({"after": "30m", "max_keep": "1y"}, "config: classes.interactive.idle.max_keep: must be",
                     id="absurd-keep"),
        pytest.param({"after": "30m", "action": "kill"},
                     "config: classes.interactive.idle.action: unknown action 'kill'; known: warn, stop, requeue",
                     id="unknown-action"),
        pytest.param({"after": "30m", "afer": "1h"}, "config: classes.interactive.idle: unknown key(s) afer",
                     id="unknown-key"),
        pytest.param({"action": "stop"}, "config: classes.interactive.idle.after: is required", id="no-after"),
        pytest.param({"after": "30m", "warn_after": "40m"},
                     "config: classes.interactive.idle.warn_after: must not be longer than after", id="warn-late"),
        pytest.param({"after": "30m", "only_when_waiting": "yes"},
                     "config: classes.interactive.idle.only_when_waiting: must be true or false", id="not-bool"),
        pytest.param("30m", "config: classes.interactive.idle: must be a mapping", id="not-a-mapping"),
    ],
)
def test_a_bad_idle_policy_is_one_line_naming_the_key(idle: object, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        scheduling_from_mapping({"classes": {"interactive": {"idle": idle}}})
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_a_short_window_is_fine_with_frequent_reads() -> None:
    idle = scheduling_from_mapping({"usage": {"interval_s": 0.5}, "classes": {"interactive": {"idle": {
        "after": 2, "warn_after": 1}}}}).idle
    assert idle[INT] == IdlePolicy(after_s=2, warn_after_s=1)


def test_serving_may_be_flagged_never_stopped() -> None:
    assert scheduling_from_mapping({"classes": {"serving": {"idle": {"after": "1h"}}}}).idle[SERVE] is not None
    with pytest.raises(InvalidRequest, match=r"^config: classes.serving.idle.action: serving is never stopped"):
        scheduling_from_mapping({"classes": {"serving": {"idle": {"after": "1h", "action": "stop"}}}})
