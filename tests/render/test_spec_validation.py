"""Spec validation: every bad input gives one located, readable line."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.render import JobSpec, SpecError, SweepSpec, expand_sweep, load_spec, parse_spec

from .helpers import JOBSPECS

BASE = "name: demo\ntask: {image: img}\n"
GROUPS = "name: demo\ngroups:\n  - name: trainer\n    task: {image: img}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            GROUPS + "    gpu: {count: 0}\n", "line 5: groups[trainer].gpu.count: must be >= 1", id="gpu-count-zero"
        ),
        pytest.param(BASE + "gpu: {count: 0}\n", "line 3: gpu.count: must be >= 1", id="shorthand-location"),
        pytest.param(BASE + "gpu: {count: 65}\n", "line 3: gpu.count: must be <= 64", id="gpu-count-too-big"),
        pytest.param(BASE + "gpu: {count: two}\n", "line 3: gpu.count: must be an integer", id="gpu-count-text"),
        pytest.param(BASE + "gpu: {count: true}\n", "line 3: gpu.count: must be an integer", id="gpu-count-bool"),
        pytest.param(
            BASE + "gpu: {models: []}\n",
            "line 3: gpu.models: must list at least one model (or be left out)",
            id="gpu-empty-models",
        ),
        pytest.param(
            BASE + "gpu: {min_memory_mib: 0}\n", "line 3: gpu.min_memory_mib: must be >= 1", id="gpu-min-memory"
        ),
        pytest.param(
            "name: Demo_1\ntask: {image: img}\n",
            "line 1: name: must be 1-48 characters of a-z, 0-9, '-', got 'Demo_1'",
            id="name-charset",
        ),
        pytest.param(
            "name: " + "a" * 49 + "\ntask: {image: img}\n",
            "line 1: name: must be at most 48 characters, got 49",
            id="name-too-long",
        ),
        pytest.param("task: {image: img}\n", "line 1: name: required", id="name-missing"),
        pytest.param("name: 12\ntask: {image: img}\n", "line 1: name: must be a string", id="name-number"),
        pytest.param(BASE + "priority: 0\n", "line 3: priority: must be >= 1", id="priority-low"),
        pytest.param(BASE + "priority: 101\n", "line 3: priority: must be <= 100", id="priority-high"),
        pytest.param(BASE + "retries: -1\n", "line 3: retries: must be >= 0", id="retries-negative"),
        pytest.param(BASE + "datacenters: []\n", "line 3: datacenters: must not be empty", id="no-datacenters"),
        pytest.param(
            BASE + "template: ../etc\n",
            "line 3: template: must be a template name like 'batch', got '../etc'",
            id="template-path",
        ),
        pytest.param(
            BASE + "gpus: {count: 1}\n", "line 3: gpus: unknown field (did you mean 'gpu'?)", id="typo-suggestion"
        ),
        pytest.param(
            "name: demo\ntask: {image: img, enviroment: {}}\n",
            "line 2: task.enviroment: unknown field",
            id="unknown-task-field",
        ),
        pytest.param(
            "name: demo\ntask: {driver: docker}\n",
            "line 2: task.image: required for the docker driver",
            id="docker-needs-image",
        ),  # fmt: skip
        pytest.param(
            "name: demo\ntask: {image: img, env: {2FAST: x}}\n",
            "line 2: task.env['2FAST']: must be an environment variable name, got '2FAST'",
            id="env-key",
        ),
        pytest.param(
            "name: demo\ntask: {image: img, env: {DEBUG: yes}}\n",
            "line 2: task.env.DEBUG: must be a string (quote true/false/yes/no in YAML)",
            id="env-bool",
        ),
        pytest.param(
            "name: demo\ntask: {image: img, env: {NVIDIA_VISIBLE_DEVICES: all}}\n",
            "line 2: task.env: NVIDIA_VISIBLE_DEVICES is set by nomad-gpu from the GPUs it assigns",
            id="env-reserved",
        ),
        pytest.param(
            BASE + "meta: {nomad_gpu_entry: x}\n",
            "line 3: meta: key 'nomad_gpu_entry': keys starting with 'nomad_gpu_' are reserved",
            id="meta-reserved",
        ),
        pytest.param(
            BASE + "meta: {'a b': x}\n",
            "line 3: meta['a b']: must be a meta key ([A-Za-z_][A-Za-z0-9_-]*), got 'a b'",
            id="meta-key",
        ),
        pytest.param(
            BASE + "gpu: {count: 1}\nshare: {milli: 100}\n",
            "line 1: set at most one of gpu, mig, share (got gpu and share)",
            id="two-capacity-kinds-shorthand",
        ),
        pytest.param(
            GROUPS + "    gpu: {}\n    mig: {profile: 3g.40gb}\n",
            "line 3: groups[trainer]: set at most one of gpu, mig, share (got gpu and mig)",
            id="two-capacity-kinds",
        ),
        pytest.param(BASE + "share: {milli: 0}\n", "line 3: share.milli: must be >= 1", id="share-zero"),
        pytest.param(BASE + "share: {milli: 1000}\n", "line 3: share.milli: must be <= 999", id="share-whole"),
        pytest.param(BASE + "share: {}\n", "line 3: share.milli: required", id="share-milli-missing"),
        pytest.param(
            BASE + "mig: {profile: 3g}\n",
            "line 3: mig.profile: must be a MIG profile like '3g.40gb', got '3g'",
            id="mig-profile",
        ),
        pytest.param(BASE + "count: 0\n", "line 3: count: must be >= 1", id="count-zero"),
        pytest.param(BASE + "resources: {cpu: 0}\n", "line 3: resources.cpu: must be >= 1", id="cpu-zero"),
        pytest.param(
            BASE + "resources: {memory: 1024, memory_max: 512}\n",
            "line 3: resources: memory_max (512) must be >= memory (1024)",
            id="memory-max-below-memory",
        ),
        pytest.param(BASE + "dev: {duration_s: -1}\n", "line 3: dev.duration_s: must be >= 0", id="dev-negative"),
        pytest.param(BASE + "dev: {fail: true}\n", "line 3: dev.duration_s: required", id="dev-no-duration"),
        pytest.param(BASE + "dev: {duration_s: 1, exit_on_signal_after_s: -1}\n",
                     "line 3: dev.exit_on_signal_after_s: must be >= 0", id="dev-exit-on-signal-negative"),
        pytest.param(
            BASE + "groups: []\n",
            "line 1: use either a top-level 'task' (one group) or 'groups', not both",
            id="task-and-groups",
        ),
        pytest.param("name: demo\ngroups: []\n", "line 2: groups: must not be empty", id="no-groups"),
        pytest.param(
            "name: demo\ngroups:\n  - {name: a, task: {image: i}}\n  - {name: a, task: {image: i}}\n",
            "line 2: groups: group name 'a' is used twice",
            id="duplicate-group",
        ),
        pytest.param(
            GROUPS.replace("trainer", "train er"),
            "line 3: groups[0].name: must be 1-64 characters of A-Z, a-z, 0-9, '_', '.', '-', got 'train er'",
            id="group-name",
        ),
        pytest.param(BASE + "kind: batch\n", "line 3: kind: must be 'job' or 'sweep', got 'batch'", id="kind"),
        pytest.param(
            BASE + "name: again\n", "line 3, column 1: invalid YAML: duplicate key 'name'", id="duplicate-key"
        ),  # fmt: skip
        pytest.param("name: demo\ntask: [\n", "line 3, column 1: invalid YAML:", id="yaml-syntax"),
        pytest.param("name: demo\n  task: x\n", "line 2, column 7: invalid YAML:", id="yaml-indent"),
        pytest.param("- name: demo\n", "the spec must be a mapping of fields, not a list", id="not-a-mapping"),
        pytest.param("# nothing\n", "the spec is empty", id="empty"),
    ],
)
def test_invalid_spec_gives_a_located_one_line_error(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(text)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_every_problem_is_said_at_once_on_one_line() -> None:
    """Every located message, joined by "; " (one line for the CLI), and listed one by one in `errors`."""
    with pytest.raises(SpecError) as info:
        load_spec(BASE + "priority: 0\ncount: 0\n")
    assert str(info.value) == "line 3: priority: must be >= 1; line 4: count: must be >= 1"
    assert info.value.errors == ("line 3: priority: must be >= 1", "line 4: count: must be >= 1")


def test_every_typo_is_reported_with_its_suggestion() -> None:
    text = "name: demo\ntask: {image: img}\npriorty: 60\nresources: {cpus: 2, memroy: 100}\n"
    with pytest.raises(SpecError) as info:
        load_spec(text)
    assert info.value.errors == (
        "line 3: priorty: unknown field (did you mean 'priority'?)",
        "line 4: resources.cpus: unknown field (did you mean 'cpu'?)",
        "line 4: resources.memroy: unknown field (did you mean 'memory'?)",
    )
    assert str(info.value) == "; ".join(info.value.errors)
    assert "more" not in str(info.value)


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(GROUPS + "    resources: {cpu: 0}\n", "line 5: groups[trainer].resources.cpu: must be >= 1",
                 id="pydantic-location"),
    pytest.param(GROUPS + "    count: 2\n    ports: {http: {static: 8080}}\n",
                 "line 1: groups[trainer]: static port 8080 (http) with count 2", id="validator-text"),
    pytest.param(GROUPS + "    gpu_memory: 14\n", "line 1: groups[trainer]: gpu_memory needs a class",
                 id="size-without-class"),
    pytest.param("name: demo\ngroups:\n  - {name: a, task: {image: i}}\n  - {name: b, task: {image: i},"
                 " gpu: {count: 0}}\n", "line 4: groups[b].gpu.count: must be >= 1", id="second-group"),
])
def test_groups_are_located_by_name(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(("written", "message"), [
    pytest.param("16GB", "resources.memory: memory is in MiB: write 15259 for '16GB' (16384 for 16GiB)",
                 id="decimal-unit"),
    pytest.param("16GiB", "resources.memory: memory is in MiB: write 16384 for '16GiB'", id="binary-unit"),
    pytest.param("512MiB", "resources.memory: memory is in MiB: write 512 for '512MiB'", id="mib"),
    pytest.param("'2048'", "resources.memory: must be a whole number of MiB, got '2048'", id="quoted-number"),
])
def test_memory_with_a_unit_says_the_unit_is_mib(written: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(BASE + f"resources: {{memory: {written}}}\n")
    assert str(info.value) == "line 3: " + message


def test_memory_max_with_a_unit_says_the_unit_is_mib() -> None:
    with pytest.raises(SpecError) as info:
        load_spec(BASE + "resources: {memory: 1024, memory_max: 4GiB}\n")
    assert str(info.value) == "line 3: resources.memory_max: memory is in MiB: write 4096 for '4GiB'"


def test_a_spec_file_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("name: demo\ngroups:\n  - name: t\n    task: {image: i}\n    gpu:\n      count: 0\n")
    with pytest.raises(SpecError, match=r"^train\.yaml:6: groups\[t\]\.gpu\.count: must be >= 1$"):
        load_spec(path)
    with pytest.raises(SpecError, match=r"^train\.yaml:6: "):
        load_spec(str(path))


def test_a_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "nope.yaml")


def test_parse_spec_takes_decoded_json_without_locations() -> None:
    with pytest.raises(SpecError, match=r"^groups\[g\]\.gpu\.count: must be >= 1$"):
        parse_spec({"name": "demo", "groups": [{"name": "g", "task": {"image": "i"}, "gpu": {"count": 0}}]})


def test_shorthand_is_one_group_called_main() -> None:
    short = load_spec(BASE + "count: 2\ngpu: {count: 4}\nresources: {cpu: 100}\n")
    long = load_spec(
        "name: demo\ngroups:\n  - name: main\n    count: 2\n    task: {image: img}\n"
        "    gpu: {count: 4}\n    resources: {cpu: 100}\n"
    )
    assert short == long


def test_defaults() -> None:
    spec = load_spec(BASE)
    assert isinstance(spec, JobSpec)
    assert (spec.team, spec.priority, spec.datacenters, spec.namespace) == ("default", 50, ["*"], "default")
    assert (spec.node_pool, spec.template, spec.retries, spec.meta, spec.dev) == (None, "batch", 0, {}, None)
    (group,) = spec.groups
    assert (group.name, group.count, group.task.driver, group.capacity_kind) == ("main", 1, "docker", None)
    assert (group.resources.cpu, group.resources.memory) == (100, 300)


def test_numbers_in_env_meta_and_args_become_text() -> None:
    spec = load_spec("name: demo\ntask: {image: img, args: [--epochs, 10], env: {N: 8, LR: 0.5}}\nmeta: {v: 3}\n")
    task = spec.groups[0].task
    assert task.args == ["--epochs", "10"]
    assert task.env == {"N": "8", "LR": "0.5"}
    assert spec.meta == {"v": "3"}


def test_non_docker_driver_needs_no_image() -> None:
    spec = load_spec("name: demo\ntask: {driver: raw_exec, command: /bin/true}\n")
    assert spec.groups[0].task.image is None


def test_capacity_kinds() -> None:
    kinds = [
        load_spec(BASE + extra).groups[0].capacity_kind
        for extra in ("gpu: {count: 2}\n", "mig: {profile: 1g.10gb}\n", "share: {milli: 250}\n", "")
    ]
    assert kinds == ["gpu", "mig", "share", None]


def test_hostile_text_is_accepted_as_data() -> None:
    # Escaping, not validation, is what keeps these out of the HCL structure.
    spec = load_spec('name: demo\ntask:\n  image: "x\\" }\\n${evil}"\n  env: {A: "%{ if true }"}\n')
    assert spec.groups[0].task.image == 'x" }\n${evil}'


def test_kind_sweep_selects_the_sweep_model() -> None:
    spec = load_spec(BASE + "kind: sweep\nsweep: {parameters: {lr: [0.1]}}\n")
    assert isinstance(spec, SweepSpec)


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        pytest.param("{}", "sweep.parameters: required", id="no-parameters"),
        pytest.param("{parameters: {}}", "sweep.parameters: must not be empty", id="empty-parameters"),
        pytest.param("{parameters: {lr: []}}", "sweep.parameters.lr: must not be empty", id="empty-values"),
        pytest.param(
            "{parameters: {lr: [0.1, [1]]}}",
            "sweep.parameters.lr[1]: must be a string, number or boolean",
            id="nested-value",
        ),
        pytest.param("{parameters: {lr: [.nan]}}", "sweep.parameters.lr[0]: must be a finite number", id="nan"),
        pytest.param(
            "{parameters: {1lr: [1]}}",
            "sweep.parameters['1lr']: must be a parameter name ([A-Za-z_][A-Za-z0-9_]*), got '1lr'",
            id="parameter-name",
        ),
        pytest.param(
            "{parameters: {lr: [1], LR: [2]}}",
            "sweep: parameter names must differ in more than case (they become TRIAL_<NAME>)",
            id="case-collision",
        ),
        pytest.param(
            "{parameters: {lr: [1]}, mode: random}",
            "sweep: trials is required with mode: random",
            id="random-needs-trials",
        ),  # fmt: skip
        pytest.param(
            "{parameters: {lr: [1]}, trials: 2}",
            "sweep: trials is only used with mode: random (a grid runs every combination)",
            id="grid-with-trials",
        ),
        pytest.param(
            "{parameters: {lr: [1, 2]}, mode: random, trials: 3}",
            "sweep: trials (3) is more than the 2 distinct combinations; use mode: grid",
            id="more-trials-than-combinations",
        ),
        pytest.param(
            "{parameters: {a: [1,2,3,4,5,6,7,8,9,10], b: [1,2,3,4,5,6,7,8,9,10], c: [1,2,3,4,5,6,7,8,9,10], "
            "d: [1,2,3,4,5,6,7,8,9,10], e: [1,2,3,4,5,6,7,8,9,10], f: [1, 2]}}",
            "sweep: the grid has 200000 combinations, more than the limit of 100000",
            id="grid-too-large",
        ),
        pytest.param(
            "{parameters: {lr: [1]}, mode: bayes}", "sweep.mode: must be one of 'grid' or 'random'", id="mode"
        ),  # fmt: skip
        pytest.param(
            "{parameters: {lr: [1]}, max_parallel: 0}", "sweep.max_parallel: must be >= 1", id="max-parallel"
        ),  # fmt: skip
    ],
)
def test_invalid_sweep(sweep: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(f"kind: sweep\n{BASE}sweep: {sweep}\n")
    assert str(info.value).startswith(f"line 4: {message}")


def test_sweep_names_must_leave_room_for_the_trial_suffix() -> None:
    name = "a" * 45

    def sweep(trials: int) -> str:
        values = ", ".join(str(i) for i in range(trials))
        return f"kind: sweep\nname: {name}\ntask: {{image: i}}\nsweep: {{parameters: {{x: [{values}]}}}}\n"

    assert len(load_spec(sweep(10)).name) == 45  # the last trial, '<name>-t9', is 48 characters
    with pytest.raises(SpecError, match=f"too long for 11 trials: trial names like '{name}-t10'"):
        load_spec(sweep(11))


def test_sweep_env_must_not_collide_with_trial_variables() -> None:
    with pytest.raises(SpecError, match=r"groups\[main\]\.task\.env\.TRIAL_LR conflicts with sweep parameter 'lr'"):
        load_spec("kind: sweep\nname: s\ntask: {image: i, env: {TRIAL_LR: x}}\nsweep: {parameters: {lr: [1]}}\n")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in sorted(JOBSPECS.glob("*.yaml"))])
def test_a_stored_spec_reparses_to_the_same_spec(path: Path) -> None:
    """The queue stores ``model_dump(mode="json")`` and re-parses it, sweep trials included."""
    spec = load_spec(path)
    specs: list[JobSpec | SweepSpec] = [spec]
    if isinstance(spec, SweepSpec):
        specs.extend(expand_sweep(spec))
    for one in specs:
        assert parse_spec(one.model_dump(mode="json")) == one


@pytest.mark.parametrize(
    ("meta", "ok"),
    [
        pytest.param("{nomad_gpu_sweep: s, nomad_gpu_trial: '3', nomad_gpu_trial_lr: '0.1'}", True, id="consistent"),
        pytest.param("{nomad_gpu_trial: '3'}", False, id="trial-without-sweep"),
        pytest.param("{nomad_gpu_sweep: s, nomad_gpu_trial: '4'}", False, id="wrong-index"),
        pytest.param("{nomad_gpu_sweep: s, nomad_gpu_trial: '3', nomad_gpu_entry: x}", False, id="other-key"),
    ],
)
def test_only_a_consistent_trial_carries_sweep_meta(meta: str, ok: bool) -> None:
    text = f"name: s-t3\ntask: {{image: i}}\nmeta: {meta}\n"
    if ok:
        assert load_spec(text).meta["nomad_gpu_trial"] == "3"
    else:
        with pytest.raises(SpecError, match="^line 3: meta: key 'nomad_gpu_.*' are reserved"):
            load_spec(text)
