"""docs/spec.md is generated from the spec models (`make spec-docs`): fresh, and every field described."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from nomad_gpu.render import specdocs
from nomad_gpu.render.spec import JobSpec, SweepSpec

PAGE = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def test_the_page_is_what_the_models_say() -> None:
    assert PAGE.read_text(encoding="utf-8") == specdocs.render(), "docs/spec.md is stale: run `make spec-docs`"


@pytest.mark.parametrize(("model", "name"), [
    pytest.param(model, name, id=f"{title}.{name}")
    for title, model, _ in specdocs.SECTIONS for name in model.model_fields
    if not (model is SweepSpec and name not in ("kind", "sweep"))
])
def test_every_field_is_on_the_page_with_a_description(model: type[BaseModel], name: str) -> None:
    row = next(r for r in specdocs.rows(model) if r[0] == (model.model_fields[name].alias or name))
    assert row[4], f"{model.__name__}.{name} has no description"


@pytest.mark.parametrize("field", ["runtime", "max_runtime", "retries", "namespace", "node_pool", "datacenters",
                                   "template", "allow_unschedulable"])
def test_the_fields_users_asked_about_are_there(field: str) -> None:
    assert f"\n| {field} |" in PAGE.read_text(encoding="utf-8")
    assert field in JobSpec.model_fields


def test_sweep_mode_trials_and_dev_fields_are_there() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for heading, field in (("## sweep", "mode"), ("## sweep", "trials"), ("## dev", "duration_s"), ("## dev", "fail")):
        section = text[text.index(heading + "\n"):]
        assert f"\n| {field} |" in section.split("\n## ", 1)[0]


def test_a_field_without_a_description_fails_loudly() -> None:
    class Bare(BaseModel):
        undocumented: int = 0

    with pytest.raises(LookupError, match="Bare.undocumented has no description"):
        list(specdocs.rows(Bare))


def test_a_docstring_under_a_field_is_its_description() -> None:
    class Documented(BaseModel):
        size: int = 1
        """How big it is."""

    assert specdocs.field_docstrings(Documented) == {"size": "How big it is."}
