"""Sweep expansion: stable grid order, seeded random draws, parameters as meta and env."""

from __future__ import annotations

import pytest

from nomad_gpu.render import JobSpec, SweepSpec, expand_sweep, load_spec, trial_parameters
from nomad_gpu.render.sweep import format_sweep_value


def sweep(parameters: str, extra: str = "", groups: str = "task: {image: i, env: {KEEP: me}}\n") -> SweepSpec:
    header = "kind: sweep\nname: hpo\nmeta: {owner: alice}\n"
    spec = load_spec(f"{header}{groups}sweep: {{parameters: {parameters}{extra}}}\n")
    assert isinstance(spec, SweepSpec)
    return spec


def test_grid_is_the_cartesian_product_in_written_order() -> None:
    spec = sweep("{lr: [0.1, 0.01], batch: [32, 64], opt: [adam]}")
    assert trial_parameters(spec) == [
        {"lr": 0.1, "batch": 32, "opt": "adam"},
        {"lr": 0.1, "batch": 64, "opt": "adam"},
        {"lr": 0.01, "batch": 32, "opt": "adam"},
        {"lr": 0.01, "batch": 64, "opt": "adam"},
    ]
    swapped = sweep("{batch: [32, 64], lr: [0.1, 0.01], opt: [adam]}")
    assert [t["batch"] for t in trial_parameters(swapped)] == [32, 32, 64, 64]


def test_each_trial_is_a_named_job_with_its_parameters_as_meta_and_env() -> None:
    jobs = expand_sweep(sweep("{lr: [0.1, 0.01], batch: [32, 64]}"))
    assert [job.name for job in jobs] == ["hpo-t0", "hpo-t1", "hpo-t2", "hpo-t3"]
    assert all(isinstance(job, JobSpec) and job.kind == "job" for job in jobs)
    third = jobs[2]
    assert third.meta == {
        "owner": "alice",
        "nomad_gpu_sweep": "hpo",
        "nomad_gpu_trial": "2",
        "nomad_gpu_trial_lr": "0.01",
        "nomad_gpu_trial_batch": "32",
    }
    assert third.groups[0].task.env == {"KEEP": "me", "TRIAL_LR": "0.01", "TRIAL_BATCH": "32"}


def test_every_group_of_a_gang_trial_gets_the_parameters() -> None:
    groups = "groups:\n  - {name: a, task: {image: i}}\n  - {name: b, task: {image: i, env: {X: y}}}\n"
    (job,) = expand_sweep(sweep("{lr: [0.5]}", groups=groups))
    assert [group.task.env for group in job.groups] == [{"TRIAL_LR": "0.5"}, {"X": "y", "TRIAL_LR": "0.5"}]


def test_the_sweep_spec_is_not_changed_by_expansion() -> None:
    spec = sweep("{lr: [0.1, 0.2]}")
    before = spec.model_dump()
    expand_sweep(spec)
    assert spec.model_dump() == before


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(0.001, "0.001", id="float"),
        pytest.param(1e-05, "1e-05", id="small-float"),
        pytest.param(64, "64", id="int"),
        pytest.param(True, "true", id="true"),
        pytest.param(False, "false", id="false"),
        pytest.param("adam", "adam", id="str"),
    ],
)
def test_values_are_formatted_for_a_task(value: str | int | float | bool, text: str) -> None:
    assert format_sweep_value(value) == text


def test_yaml_value_types_survive() -> None:
    (job,) = expand_sweep(sweep("{amp: [true], opt: ['1e-3'], n: [3]}"))
    assert {k: v for k, v in job.groups[0].task.env.items() if k.startswith("TRIAL_")} == {
        "TRIAL_AMP": "true",
        "TRIAL_OPT": "1e-3",
        "TRIAL_N": "3",
    }


RANDOM = "{lr: [0.1, 0.03, 0.01, 0.003, 0.001], batch: [16, 32, 64, 128], wd: [0.0, 0.1]}"


def test_random_draws_are_determined_by_the_seed() -> None:
    first = trial_parameters(sweep(RANDOM, ", mode: random, trials: 6, seed: 7"))
    again = trial_parameters(sweep(RANDOM, ", mode: random, trials: 6, seed: 7"))
    other = trial_parameters(sweep(RANDOM, ", mode: random, trials: 6, seed: 8"))
    assert first == again
    assert first != other
    assert len(first) == 6


def test_random_trials_are_distinct_combinations_from_the_lists() -> None:
    spec = sweep(RANDOM, ", mode: random, trials: 40, seed: 0")
    trials = trial_parameters(spec)
    grid = trial_parameters(sweep(RANDOM))
    assert len(trials) == 40 == len(grid)
    assert sorted(map(repr, trials)) == sorted(map(repr, grid))  # all 40 combinations, each once
    assert trials != grid  # but not in grid order


def test_random_sweep_names_and_indexes_follow_draw_order() -> None:
    spec = sweep(RANDOM, ", mode: random, trials: 3, seed: 1")
    jobs = expand_sweep(spec)
    params = trial_parameters(spec)
    for index, (job, drawn) in enumerate(zip(jobs, params, strict=True)):
        assert job.name == f"hpo-t{index}"
        assert job.meta["nomad_gpu_trial"] == str(index)
        assert job.meta["nomad_gpu_trial_lr"] == format_sweep_value(drawn["lr"])


def test_max_parallel_and_counts_are_exposed_for_the_queue() -> None:
    spec = sweep("{lr: [1, 2, 3]}", ", max_parallel: 2")
    assert (spec.sweep.max_parallel, spec.sweep.trial_count, spec.sweep.grid_size) == (2, 3, 3)
    assert sweep("{lr: [1, 2, 3]}").sweep.max_parallel is None
