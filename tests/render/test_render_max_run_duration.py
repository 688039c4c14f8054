"""`max_runtime` reaches Nomad as the group's `max_run_duration` only where every agent has the field
(Nomad 2.0.3 on, `TaskGroup.MaxRunDuration`) and only for batch jobs (`TaskGroup.Validate` refuses
other job types); elsewhere the service's own timer is the only limit."""

from __future__ import annotations

import pytest

from nomad_gpu.devcluster.hcl import HclError, parse_job_hcl
from nomad_gpu.render import JobSpec, render_job

from .hclview import labelled, parse_job, text
from .helpers import placement_for

BASE = {"name": "train", "team": "ml", "gpu": {"count": 1}, "task": {"image": "pytorch:2"},
        "resources": {"cpu": 1000, "memory": 4096}}


def _spec(**extra: object) -> JobSpec:
    return JobSpec.model_validate({**BASE, **extra})


def _group(hcl: str) -> dict[str, object]:
    _, body = parse_job(hcl)
    (group,) = labelled(body, "group").values()
    return group


def test_a_batch_job_with_max_runtime_carries_max_run_duration_where_nomad_has_it() -> None:
    spec = _spec(max_runtime="1h30m")
    hcl = render_job(spec, job_id="ngpu-1", placement=placement_for(spec), max_run_duration=True)
    assert text(_group(hcl)["max_run_duration"]) == "5400s"
    parsed = parse_job_hcl(hcl)  # the dev cluster playing 2.0.3+ maps it as Nomad does
    assert parsed["TaskGroups"][0]["MaxRunDuration"] == 5400 * 10**9


def test_before_2_0_3_the_field_is_left_out_and_the_job_still_parses() -> None:
    spec = _spec(max_runtime=90)
    hcl = render_job(spec, job_id="ngpu-1", placement=placement_for(spec), max_run_duration=False)
    assert "max_run_duration" not in hcl
    parse_job_hcl(hcl, max_run_duration=False)  # what Nomad 2.0.2 and older accept
    with_field = render_job(spec, job_id="ngpu-1", placement=placement_for(spec), max_run_duration=True)
    with pytest.raises(HclError, match='argument named "max_run_duration" is not expected'):
        parse_job_hcl(with_field, max_run_duration=False)


def test_no_max_runtime_no_field_and_never_on_a_service_job() -> None:
    spec = _spec()
    assert "max_run_duration" not in render_job(spec, job_id="ngpu-1", placement=placement_for(spec),
                                                max_run_duration=True)
    service = _spec(template="service", max_runtime=60)
    assert "max_run_duration" not in render_job(service, job_id="ngpu-2", placement=placement_for(service),
                                                max_run_duration=True)
