"""The operator's run-time defaults behind ETAs (`runtime_defaults:`) and what each ETA rests on."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.domain.ids import EntryId
from nomad_gpu.render import parse_spec
from nomad_gpu.service.config.runtimes import RuntimeDefaults, eta_bases, runtime_defaults_from_mapping
from nomad_gpu.service.config.settings import scheduling_from_mapping


def spec(**extra: Any) -> Any:
    return parse_spec({"name": "j", "task": {"image": "b"}, "gpu": {"count": 1}, **extra})


@pytest.mark.parametrize(("extra", "expected"), [
    pytest.param({"runtime": "90m"}, (5400.0, "runtime"), id="spec-runtime-first"),
    pytest.param({"class": "training"}, (7200.0, "class training default"), id="class"),
    pytest.param({}, (3600.0, "template batch default"), id="template"),
])
def test_an_estimate_says_where_it_comes_from(extra: dict[str, Any], expected: tuple[float, str]) -> None:
    assert RuntimeDefaults().estimate(spec(**extra)) == expected


def test_the_config_overrides_one_name_and_keeps_the_others() -> None:
    settings = scheduling_from_mapping({"runtime_defaults": {"classes": {"training": "3h"},
                                                             "templates": {"batch": None}}})
    got = settings.runtime_defaults
    assert got.classes["training"] == 10800.0 and got.classes["hpo"] == 1800.0
    assert got.templates["batch"] is None and got.estimate(spec()) == (None, "template batch default")


@pytest.mark.parametrize(("raw", "message"), [
    pytest.param({"classes": {"training": "soon"}}, "runtime_defaults.classes.training: must be a duration"),
    pytest.param({"classes": {"trainnig": "1h"}}, "runtime_defaults.classes: unknown class"),
    pytest.param({"template": {}}, "unknown key(s) template"),
    pytest.param([], "must be a mapping"),
])
def test_a_bad_default_is_one_line_naming_the_key(raw: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=None) as err:
        runtime_defaults_from_mapping(raw)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_queued_eta_names_only_the_defaults_it_waits_behind() -> None:
    a, b, c, d = (EntryId(x) for x in "abcd")
    ends = {a: 100.0}
    starts = {b: 100.0, c: 160.0, d: None}
    out = eta_bases(ends, starts, {b: 60.0, c: 30.0}, {a: "runtime", b: "class hpo default", c: "runtime"})
    assert out == {a: (100.0, "runtime"), b: (100.0, "runtime"), c: (160.0, "estimate from class hpo default"),
                   d: (None, "")}
