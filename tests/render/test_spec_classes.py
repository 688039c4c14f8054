"""The spec's `class` and `gpu_memory`: read exactly, overridden per group, refused in one located line."""

from __future__ import annotations

import pytest

from nomad_gpu.render import JobSpec, SpecError, SweepSpec, expand_sweep, load_spec, parse_spec
from nomad_gpu.render.gpumemory import GIB, MIB, gpu_memory_bytes, mib_covering

BASE = "name: demo\ntask: {image: img}\n"


@pytest.mark.parametrize(
    ("value", "need"),
    [
        pytest.param(14, 14 * GIB, id="int-gib"),
        pytest.param(9.75, 9984 * MIB, id="float-gib-exact"),
        pytest.param(0.1, -(-GIB // 10), id="float-read-as-decimal-rounded-up"),
        pytest.param("14GiB", 14 * GIB, id="gib"),
        pytest.param("15GB", 15 * 10**9, id="gb-decimal"),
        pytest.param("14336MiB", 14336 * MIB, id="mib"),
        pytest.param("14 GiB", 14 * GIB, id="space-before-unit"),
        pytest.param("512MB", 512 * 10**6, id="mb-decimal"),
        pytest.param("1TiB", 1 << 40, id="tib"),
        pytest.param("1.5kB", 1500, id="kb"),
    ],
)
def test_gpu_memory_is_read_exactly(value: object, need: int) -> None:
    assert gpu_memory_bytes(value) == need


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("14", "text needs a unit", id="text-without-unit"),
        pytest.param("14gb", "unknown unit 'gb'", id="lower-case-unit-not-guessed"),
        pytest.param("14 GiBs", "unknown unit 'GiBs'", id="unknown-unit"),
        pytest.param("-1GiB", "must be a number of GiB", id="negative-text"),
        pytest.param(-1, "must be more than 0", id="negative-number"),
        pytest.param(0, "must be more than 0", id="zero"),
        pytest.param(True, "must be a number of GiB", id="bool"),
        pytest.param(float("nan"), "must be a number of GiB", id="nan"),
        pytest.param(float("inf"), "must be a number of GiB", id="inf"),
        pytest.param("17TiB", "at most 16TiB", id="too-big"),
        pytest.param([14], "got list", id="list"),
    ],
)
def test_bad_gpu_memory_is_one_line(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        gpu_memory_bytes(value)
    assert "\n" not in str(info.value)


def test_a_device_fits_when_its_whole_mib_hold_the_need() -> None:
    assert mib_covering(9984 * MIB) == 9984  # an H100 1g.10gb (9.75 GiB) holds exactly 9.75
    assert mib_covering(10 * GIB) == 10240  # ... and not 10 GiB
    assert mib_covering(15 * 10**9) == 14306  # 15 GB is 14305.1 MiB: one MiB short does not fit


@pytest.mark.parametrize(
    ("text", "job_class", "group_class", "need"),
    [
        pytest.param(BASE + "class: serving\ngpu_memory: 14GiB\n", "serving", "serving", 14 * GIB, id="job-level"),
        pytest.param(
            "name: demo\nclass: training\ngroups:\n  - name: a\n    class: serving\n    task: {image: img}\n"
            "    gpu_memory: 9.75\n",
            "training", "serving", 9984 * MIB, id="group-overrides-job",
        ),
        pytest.param(BASE + "class: hpo\n", "hpo", "hpo", None, id="class-without-size"),
        pytest.param(BASE + "class: training\ngpu: {count: 2}\ngpu_memory: 40\n", "training", "training", 40 * GIB,
                     id="training-count-and-memory"),
        pytest.param(BASE + "gpu: {count: 1}\ngpu_memory: 40\n", None, None, 40 * GIB, id="gpu-with-memory-no-class"),
        pytest.param(BASE, None, None, None, id="no-class-as-today"),
    ],
)
def test_class_and_size_are_read(text: str, job_class: str | None, group_class: str | None,
                                 need: int | None) -> None:
    spec = load_spec(text)
    assert isinstance(spec, JobSpec)
    assert spec.workload_class == job_class
    assert spec.class_of(spec.groups[0]) == group_class
    assert spec.groups[0].gpu_memory_bytes == need


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(BASE + "class: servin\n", "line 3: class: must be one of 'serving', 'training', 'hpo'",
                     id="unknown-class"),
        pytest.param(BASE + "class: serving\ngpu_memory: 14gb\n", "line 4: gpu_memory: unknown unit 'gb'",
                     id="bad-unit-located"),
        pytest.param(BASE + "gpu_memory: 14\n", "line 1: groups[main]: gpu_memory needs a class",
                     id="size-without-class"),
        pytest.param(BASE + "class: serving\nmig: {profile: 1g.10gb}\ngpu_memory: 9\n",
                     "line 1: gpu_memory sizes a choice the service makes; mig names the kind itself",
                     id="memory-with-mig"),
        pytest.param(BASE + "class: hpo\nshare: {milli: 250}\ngpu_memory: 9\n",
                     "line 1: gpu_memory sizes a choice the service makes; share names the kind itself",
                     id="memory-with-share"),
        pytest.param(BASE + "class: training\ngpu: {min_memory_mib: 1000}\ngpu_memory: 9\n",
                     "line 1: give gpu_memory or gpu.min_memory_mib, not both", id="two-memory-floors"),
    ],
)
def test_bad_class_or_size_is_one_located_line(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(text)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_who_chooses_the_kind() -> None:
    spec = load_spec(
        "name: demo\nclass: training\ngroups:\n"
        "  - {name: sized, task: {image: img}, gpu_memory: 20}\n"
        "  - {name: explicit, task: {image: img}, gpu: {count: 2}}\n"
        "  - {name: class-only, task: {image: img}, class: serving}\n"
    )
    assert [spec.chooses_kind(g) for g in spec.groups] == [True, False, True]


def test_a_stored_spec_says_class_and_reparses_the_same() -> None:
    spec = load_spec(BASE + "class: exploratory\ngpu_memory: \"15GB\"\n")
    stored = spec.model_dump(mode="json")
    assert stored["class"] == "exploratory" and "workload_class" not in stored
    assert stored["groups"][0]["gpu_memory"] == "15GB"
    assert parse_spec(stored) == spec


def test_sweep_trials_default_to_hpo_and_keep_an_explicit_class() -> None:
    sweep = load_spec("name: s\nkind: sweep\nsweep: {parameters: {lr: [1, 2]}}\ntask: {image: img}\ngpu_memory: 8\n")
    assert isinstance(sweep, SweepSpec)
    assert sweep.class_of(sweep.groups[0]) == "hpo"
    trials = expand_sweep(sweep)
    assert [t.class_of(t.groups[0]) for t in trials] == ["hpo", "hpo"]
    assert all(t.chooses_kind(t.groups[0]) for t in trials)
    assert all(parse_spec(t.model_dump(mode="json")) == t for t in trials)
    named = load_spec("name: s\nkind: sweep\nclass: exploratory\nsweep: {parameters: {lr: [1]}}\n"
                      "task: {image: img}\n")
    assert isinstance(named, SweepSpec)
    assert [t.class_of(t.groups[0]) for t in expand_sweep(named)] == ["exploratory"]


def test_a_cpu_only_sweep_stays_cpu_only() -> None:
    """The implicit `hpo` of a sweep sizes nothing: a trial without a size or kind asks no GPU."""
    sweep = load_spec("name: s\nkind: sweep\nsweep: {parameters: {lr: [1]}}\ntask: {image: img}\n")
    assert isinstance(sweep, SweepSpec)
    (trial,) = expand_sweep(sweep)
    assert trial.class_of(trial.groups[0]) == "hpo"
    assert not trial.chooses_kind(trial.groups[0])


def test_every_class_has_an_example_spec() -> None:
    from .helpers import JOBSPECS

    found = {}
    for path in sorted(JOBSPECS.glob("class-*.yaml")):
        spec = load_spec(path)
        found.update({spec.class_of(g): path.name for g in spec.groups})
    assert set(found) == {"serving", "training", "hpo", "exploratory", "interactive"}
