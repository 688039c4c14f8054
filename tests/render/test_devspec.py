"""`dev: {gpu_util: ...}`: a plain number as before, or a timeline; one line for anything else."""

from __future__ import annotations

import pytest

from nomad_gpu.render import SpecError
from nomad_gpu.render.devspec import gpu_util_meta
from nomad_gpu.render.loading import load_spec
from nomad_gpu.render.spec import JobSpec


def _spec(util: str) -> JobSpec:
    spec = load_spec(f"name: d\ntask: {{image: i}}\ndev: {{duration_s: 60, gpu_util: {util}}}\n")
    assert isinstance(spec, JobSpec)
    return spec


def test_a_number_and_a_timeline_render_into_the_meta() -> None:
    plain, timeline = _spec("35").dev, _spec("[[0, 80], [600, 0], [900.5, 12.5]]").dev
    assert plain is not None and timeline is not None
    assert gpu_util_meta(plain.gpu_util or 0) == "35"
    assert timeline.gpu_util is not None and gpu_util_meta(timeline.gpu_util) == "0:80,600:0,900.5:12.5"


@pytest.mark.parametrize("util", ["[[600, 0], [0, 80]]", "[]", "[[0, 120]]", "[[-1, 5]]", "[[0]]", "101", "abc",
                                  "[[0, .nan]]"])
def test_a_bad_utilisation_is_one_line(util: str) -> None:
    with pytest.raises(SpecError) as info:
        _spec(util)
    assert "gpu_util" in str(info.value) and "must be a percentage from 0 to 100, or [seconds, percent]" in str(
        info.value)
