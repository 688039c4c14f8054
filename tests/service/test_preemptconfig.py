"""The take-back config (service/config/preemptconfig.py): defaults, the issue's example, and every bad input
refused at start with one line naming the key."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.preemption import Preemptible
from nomad_gpu.service.config.preemptconfig import grace_warning
from nomad_gpu.service.config.settings import scheduling_from_mapping


def test_defaults() -> None:
    tb = scheduling_from_mapping({}).take_back
    p = tb.preemption
    assert (p.enabled, p.min_runtime_s, p.max_preemptions, p.preempt_after_s, p.borrow_requires) == (
        True, 300.0, 3, 30.0, "preemptible")
    assert p.preempts["serving"] == {"exploratory", "hpo", "interactive"}
    assert p.preempts["training"] == {"exploratory", "hpo"}
    assert p.preemptible["serving"] is Preemptible.NO
    assert p.preemptible["training"] is Preemptible.WITH_CHECKPOINT
    assert all(p.preemptible[c] is Preemptible.YES for c in ("exploratory", "hpo", "interactive"))
    assert tb.max_kill_timeout_s == 30.0


def test_the_issues_example_is_read() -> None:
    tb = scheduling_from_mapping({
        "preemption": {"enabled": True, "min_runtime": "5m", "max_preemptions": 3, "preempt_after": "0s",
                       "borrow_requires": "preemptible"},
        "classes": {"serving": {"preempts": ["exploratory", "hpo", "interactive"], "tiers": [["gpu"]]},
                    "training": {"preempts": ["exploratory", "hpo"], "preemptible": "with_checkpoint"},
                    "hpo": {"preemptible": False}},
        "nomad": {"max_kill_timeout": "2m", "local_parse": True},
    }).take_back
    assert tb.preemption.preempt_after_s == 0 and tb.preemption.min_runtime_s == 300
    assert tb.preemption.preemptible["hpo"] is Preemptible.NO
    assert tb.max_kill_timeout_s == 120


@pytest.mark.parametrize(("raw", "key"), [
    pytest.param({"preemption": {"enabled": True, "grace": 5}}, "preemption.grace", id="unknown-key"),
    pytest.param({"preemption": {"enabled": "yes"}}, "preemption.enabled", id="enabled-a-string"),
    pytest.param({"preemption": {"min_runtime": "-5m"}}, "preemption.min_runtime", id="negative-duration"),
    pytest.param({"preemption": {"min_runtime": -5}}, "preemption.min_runtime", id="negative-number"),
    pytest.param({"preemption": {"preempt_after": "soon"}}, "preemption.preempt_after", id="not-a-duration"),
    pytest.param({"preemption": {"max_preemptions": -1}}, "preemption.max_preemptions", id="negative-count"),
    pytest.param({"preemption": {"max_preemptions": 99}}, "preemption.max_preemptions", id="absurd-count"),
    pytest.param({"preemption": {"borrow_requires": "gold"}}, "preemption.borrow_requires", id="borrow"),
    pytest.param({"preemption": 5}, "preemption", id="not-a-mapping"),
    pytest.param({"classes": {"hpo": {"preempts": ["hpo"]}}}, "classes.hpo.preempts", id="preempts-itself"),
    pytest.param({"classes": {"hpo": {"preempts": ["batch"]}}}, "classes.hpo.preempts", id="unknown-class"),
    pytest.param({"classes": {"training": {"preempts": ["serving"]}}}, "classes.training.preempts",
                 id="preempts-serving"),
    pytest.param({"classes": {"hpo": {"preempts": "exploratory"}}}, "classes.hpo.preempts", id="not-a-list"),
    pytest.param({"classes": {"hpo": {"preemptible": "maybe"}}}, "classes.hpo.preemptible", id="bad-preemptible"),
    pytest.param({"classes": {"serving": {"preemptible": True}}}, "classes.serving.preemptible",
                 id="serving-preemptible"),
    pytest.param({"nomad": {"max_kill_timeout": "-1s"}}, "nomad.max_kill_timeout", id="negative-kill-timeout"),
    pytest.param({"nomad": {"max_kill_timeout": 0}}, "nomad.max_kill_timeout", id="zero-kill-timeout"),
])
def test_bad_input_is_refused_in_one_line_naming_the_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        scheduling_from_mapping(raw)
    line = str(caught.value)
    assert "\n" not in line and key in line, line


def test_a_grace_past_the_nodes_max_kill_timeout_is_warned_of() -> None:
    assert grace_warning(30, 30) == ""
    assert "max_kill_timeout (30 s)" in grace_warning(120, 30)
