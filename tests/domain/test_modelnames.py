"""Model names as users write them (what our views print) against the exact names of the fleet."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.modelnames import board_model, resolve, short_model

A100_80 = "NVIDIA A100-SXM4-80GB"
A100_40 = "NVIDIA A100-PCIE-40GB"
H100 = "NVIDIA H100 80GB HBM3"
L40S = "NVIDIA L40S"
FLEET = (A100_80, H100, L40S)


@pytest.mark.parametrize(("written", "exact"), [
    pytest.param(A100_80, A100_80, id="exact"),
    pytest.param("A100", A100_80, id="queue-short-form"),
    pytest.param("a100", A100_80, id="any-case"),
    pytest.param("A100-80GB", A100_80, id="dashboard-form"),
    pytest.param("A100-SXM4-80GB", A100_80, id="without-vendor"),
    pytest.param("nvidia a100 sxm4 80gb", A100_80, id="spaces-for-dashes"),
    pytest.param("NVIDIA A100", A100_80, id="vendor-and-leading-words"),
    pytest.param("H100 80GB", H100, id="leading-words"),
    pytest.param("l40s", L40S, id="short-is-whole-name"),
])
def test_one_spelling_one_model(written: str, exact: str) -> None:
    assert resolve(written, FLEET).exact == exact


@pytest.mark.parametrize("written", ["A10", "H200", "80GB", "SXM4", "", "A100-40GB"])
def test_spellings_that_stand_for_nothing_here(written: str) -> None:
    assert resolve(written, FLEET).models == ()


def test_ambiguous_spelling_lists_the_candidates() -> None:
    found = resolve("A100", (A100_80, A100_40, H100))
    assert found.exact is None
    assert found.models == (A100_40, A100_80)
    assert resolve("A100-80GB", (A100_80, A100_40)).exact == A100_80


def test_an_exact_name_stands_for_itself_even_when_a_prefix_of_another() -> None:
    assert resolve("NVIDIA H100", ("NVIDIA H100", H100)).models == ("NVIDIA H100",)


@pytest.mark.parametrize(("model", "short", "board"), [
    (A100_80, "A100", "A100-80GB"),
    (H100, "H100", "H100 80GB HBM3"),
    ("NVIDIA RTX 6000 Ada", "RTX 6000", "RTX 6000 Ada"),
    ("Tesla V100-PCIE-32GB", "V100", "V100-32GB"),
])
def test_the_forms_views_print(model: str, short: str, board: str) -> None:
    assert short_model(model) == short
    assert board_model(model) == board
