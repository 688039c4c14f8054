"""Random sweeps sample from ranges: log-uniform numbers, whole numbers, beside lists as before."""

from __future__ import annotations

import math
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nomad_gpu.render import SpecError, SweepSpec, expand_sweep, load_spec, trial_parameters


def sweep(parameters: str, trials: int = 20, seed: int = 0, mode: str = "random") -> SweepSpec:
    extra = f", trials: {trials}" if mode == "random" else ""
    spec = load_spec(f"kind: sweep\nname: hpo\ntask: {{image: i}}\n"
                     f"sweep: {{mode: {mode}, seed: {seed}{extra}, parameters: {parameters}}}\n")
    assert isinstance(spec, SweepSpec)
    return spec


def test_a_log_range_written_as_yaml_reads_it_spans_its_decades() -> None:
    """`1e-5` without a dot is text to YAML; a range bound takes it as the number it means."""
    trials = trial_parameters(sweep("{lr: {min: 1e-5, max: 1e-1, log: true}}", trials=400))
    values = [cast(float, t["lr"]) for t in trials]  # checked to be floats just below
    assert all(isinstance(v, float) and 1e-5 <= v <= 1e-1 for v in values)
    decades = {math.floor(math.log10(v)) for v in values}
    assert decades == {-5, -4, -3, -2}  # log-uniform: every decade drawn (uniform would put ~90 % in the last)
    per_decade = [sum(1 for v in values if math.floor(math.log10(v)) == d) for d in (-5, -4, -3, -2)]
    assert min(per_decade) > 60


def test_an_int_range_gives_whole_numbers_within_bounds() -> None:
    trials = trial_parameters(sweep("{batch: {min: 16, max: 256, int: true}, opt: [adam, sgd]}", trials=50))
    assert all(isinstance(t["batch"], int) and 16 <= t["batch"] <= 256 for t in trials)
    assert {t["opt"] for t in trials} == {"adam", "sgd"}
    assert len({(t["batch"], t["opt"]) for t in trials}) == 50  # distinct combinations


def test_every_combination_of_a_small_space_is_drawn_once() -> None:
    trials = trial_parameters(sweep("{k: {min: 1, max: 4, int: true}, opt: [a, b]}", trials=8))
    assert sorted((t["k"], t["opt"]) for t in trials) == [(k, o) for k in range(1, 5) for o in "ab"]


def test_the_seed_decides_and_trials_carry_the_value() -> None:
    a = trial_parameters(sweep("{lr: {min: 0.0001, max: 0.1, log: true}}", seed=3))
    assert a == trial_parameters(sweep("{lr: {min: 0.0001, max: 0.1, log: true}}", seed=3))
    assert a != trial_parameters(sweep("{lr: {min: 0.0001, max: 0.1, log: true}}", seed=4))
    job = expand_sweep(sweep("{lr: {min: 0.0001, max: 0.1, log: true}}", seed=3))[1]
    assert job.groups[0].task.env["TRIAL_LR"] == job.meta["nomad_gpu_trial_lr"] == repr(a[1]["lr"])


def test_lists_only_draw_as_before() -> None:
    """Ranges must not change the trials of an existing list-only random sweep (same seed, same trials)."""
    spec = sweep("{lr: [0.1, 0.01, 0.001], batch: [32, 64]}", trials=4, seed=7)
    assert trial_parameters(spec) == [{"lr": 0.01, "batch": 32}, {"lr": 0.1, "batch": 64},  # the code before
                                      {"lr": 0.01, "batch": 64}, {"lr": 0.001, "batch": 64}]


@pytest.mark.parametrize(("parameters", "mode", "trials", "words"), [
    pytest.param("{lr: {min: 1e-5, max: 1e-1}}", "grid", 0, "ranges are sampled by mode: random", id="grid"),
    pytest.param("{lr: {min: 0.1, max: 0.1}}", "random", 2, "must be below max", id="empty"),
    pytest.param("{lr: {min: 0, max: 1, log: true}}", "random", 2, "log: true needs min > 0", id="log-zero"),
    pytest.param("{b: {min: 1.5, max: 8, int: true}}", "random", 2, "whole-number min and max", id="int-bounds"),
    pytest.param("{b: {min: 1, max: 4, int: true}}", "random", 5, "more than the 4 distinct", id="too-many"),
    pytest.param("{b: {min: one, max: 4}}", "random", 2, "sweep.parameters.b", id="not-a-number"),
    pytest.param("{b: {min: 1, max: 4, step: 1}}", "random", 2, "step", id="unknown-key"),
])
def test_bad_ranges_are_refused_with_the_field(parameters: str, mode: str, trials: int, words: str) -> None:
    with pytest.raises(SpecError, match=words.replace(".", r"\.")):
        sweep(parameters, trials=trials, mode=mode)


def test_a_stored_trial_of_a_range_sweep_reparses() -> None:
    spec = sweep("{lr: {min: 1e-5, max: 1e-1, log: true}, b: {min: 16, max: 256, int: true}}")
    again = SweepSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec and spec.model_dump(mode="json")["sweep"]["parameters"]["b"]["int"] is True


@settings(max_examples=50, deadline=None)
@given(low=st.integers(-1000, 1000), width=st.integers(1, 2000), log=st.booleans(), seed=st.integers(0, 2**32))
def test_int_ranges_stay_in_bounds_and_distinct(low: int, width: int, log: bool, seed: int) -> None:
    if log:
        low = abs(low) + 1
    trials = min(width + 1, 30)
    values = [t["x"] for t in trial_parameters(
        sweep(f"{{x: {{min: {low}, max: {low + width}, int: true, log: {str(log).lower()}}}}}", trials, seed))]
    assert len(values) == trials == len(set(values))
    assert all(isinstance(v, int) and low <= v <= low + width for v in values)
