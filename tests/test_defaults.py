"""Defaults with one home: the service's port and the head-of-line threshold live in nomad_gpu.defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nomad_gpu import defaults
from nomad_gpu.domain.cycle import CycleConfig
from nomad_gpu.service.config.settings import SchedulingSettings, ServiceSettings, scheduling_from_mapping
from nomad_gpu.service.http.listen import plan_listen

PACKAGE = Path(__file__).resolve().parents[1] / "nomad_gpu"


@pytest.mark.parametrize("literal", [r"\b4690\b", r"hol_threshold_s\b.*\b600\b"])
def test_the_literal_is_written_once(literal: str) -> None:
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(literal, line) and p.name != "defaults.py"]
    assert not found, f"write it as an import from nomad_gpu.defaults: {found}"


def test_every_layer_uses_the_same_defaults() -> None:
    assert CycleConfig().hol_threshold_s == SchedulingSettings().hol_threshold_s == defaults.HOL_THRESHOLD_S
    assert ServiceSettings().listen == defaults.DEFAULT_ADDR
    assert plan_listen("http://127.0.0.1", token_required=False).port == defaults.DEFAULT_PORT


def test_a_config_file_that_leaves_keys_out_gets_the_defaults() -> None:
    assert scheduling_from_mapping({}) == SchedulingSettings()
