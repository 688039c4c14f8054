"""`preemptible:` and `checkpoint:` (DESIGN 17): what a spec may say, rendered as Nomad's kill_signal and
kill_timeout; bad input refused with one line naming the key."""

from __future__ import annotations

import pytest

from nomad_gpu.render import JobSpec, SpecError, load_spec
from nomad_gpu.render.checkpoint import DEFAULT_KILL_TIMEOUT_S, grace_s
from nomad_gpu.render.jobjson import job_json
from nomad_gpu.render.jobs import build_job_context

from .helpers import placement_for

BASE = "name: ck\nclass: training\ntask: {image: i}\ngpu: {count: 1}\n"


def _spec(extra: str) -> JobSpec:
    spec = load_spec(BASE + extra)
    assert isinstance(spec, JobSpec)
    return spec


def test_checkpoint_and_preemptible_are_read_with_their_defaults() -> None:
    spec = _spec("preemptible: false\ncheckpoint: {grace: 90s}\n")
    assert spec.preemptible is False
    assert spec.checkpoint is not None and spec.checkpoint.signal == "SIGTERM" and spec.checkpoint.grace == 90
    plain = _spec("")
    assert plain.preemptible is None and plain.checkpoint is None
    assert grace_s(plain.checkpoint) == DEFAULT_KILL_TIMEOUT_S == 5


def test_the_grace_is_rendered_as_kill_signal_and_kill_timeout_in_hcl_and_json() -> None:
    spec = _spec("checkpoint: {signal: SIGUSR1, grace: 2m}\n")
    context = build_job_context(spec, job_id="ngpu-q000001", placement=placement_for(spec))
    task = context["groups"][0]["task"]
    assert (task["kill_signal"], task["kill_timeout"]) == ("SIGUSR1", "120s")
    built = job_json("batch", context, max_run_duration_field=False)
    assert built is not None
    rendered = built["TaskGroups"][0]["Tasks"][0]
    assert (rendered["KillSignal"], rendered["KillTimeout"]) == ("SIGUSR1", 120 * 10**9)
    plain = _spec("")
    task = build_job_context(plain, job_id="ngpu-q000001", placement=placement_for(plain))["groups"][0]["task"]
    assert task["kill_signal"] is None and task["kill_timeout"] is None


@pytest.mark.parametrize(("extra", "key"), [
    pytest.param("preemptible: 'yes'\n", "preemptible", id="preemptible-a-string"),
    pytest.param("preemptible: 1\n", "preemptible", id="preemptible-a-number"),
    pytest.param("checkpoint: {grace: -5s}\n", "checkpoint.grace", id="negative-grace"),
    pytest.param("checkpoint: {grace: -5}\n", "checkpoint.grace", id="negative-number"),
    pytest.param("checkpoint: {grace: 0}\n", "checkpoint.grace", id="zero-grace"),
    pytest.param("checkpoint: {grace: 30d}\n", "checkpoint.grace", id="absurd-grace"),
    pytest.param("checkpoint: {grace: soon}\n", "checkpoint.grace", id="not-a-duration"),
    pytest.param("checkpoint: {signal: SIGKILL}\n", "checkpoint.signal", id="uncatchable-signal"),
    pytest.param("checkpoint: {signal: SIGFOO}\n", "checkpoint.signal", id="unknown-signal"),
    pytest.param("checkpoint: {grace: 1m, when: now}\n", "checkpoint.when", id="unknown-key"),
    pytest.param("checkpoint: 60\n", "checkpoint", id="not-a-mapping"),
])
def test_bad_input_is_refused_in_one_line_naming_the_key(extra: str, key: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(BASE + extra)
    line = str(caught.value)
    assert "\n" not in line and key in line, line


def test_a_group_may_not_differ_from_its_job() -> None:
    text = "name: g\ngroups:\n  - name: a\n    preemptible: true\n    task: {image: i}\n"
    with pytest.raises(SpecError) as caught:
        load_spec(text)
    assert "preemptible" in str(caught.value)
