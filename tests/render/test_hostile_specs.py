"""Hostile spec text: the one loader (CLI and API) refuses what would expand, nest or crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nomad_gpu.render import SpecError, SweepSpec, load_spec
from nomad_gpu.render.loading import MAX_DEPTH, decode_spec
from nomad_gpu.render.sweepconfig import MAX_TRIALS, TRIALS_CEILING


def alias_bomb(levels: int, width: int = 9) -> str:
    """The 'billion laughs' shape: each level lists the previous one `width` times."""
    lines = ["name: bomb", "task: {image: busybox}", "l0: &l0 [x]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_aliases_are_refused_with_their_line() -> None:
    with pytest.raises(SpecError, match=r"^line 3, column 5: invalid YAML: anchors \(&l0\) are not allowed"):
        load_spec(alias_bomb(6))


def test_an_alias_to_nothing_is_refused_too() -> None:
    with pytest.raises(SpecError, match=r"^line 2, column 7: invalid YAML: aliases \(\*t\) are not allowed"):
        load_spec("name: a\ntask: *t\n")


def test_a_file_names_itself_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(3))
    with pytest.raises(SpecError, match=r"^bomb\.yaml: line 3, column 5: invalid YAML: anchors"):
        load_spec(path)


def test_a_merge_key_needs_an_alias_and_is_refused() -> None:
    text = "base: &b {image: busybox}\nname: m\ntask:\n  <<: *b\n"
    with pytest.raises(SpecError, match="anchors"):
        load_spec(text)


def nested_yaml(depth: int) -> str:
    return "name: deep\ntask: {image: i}\nmeta: " + "[" * depth + "]" * depth + "\n"


def test_deep_yaml_is_one_located_error_not_a_recursion_error() -> None:
    with pytest.raises(SpecError, match=f"^line 3, column .*: invalid YAML: nested deeper than {MAX_DEPTH} levels"):
        load_spec(nested_yaml(50_000))


def test_nesting_up_to_the_limit_is_only_a_type_error() -> None:
    with pytest.raises(SpecError, match="^line 3: meta: must be a mapping"):
        load_spec(nested_yaml(MAX_DEPTH - 1))


@pytest.mark.parametrize("depth", [pytest.param(MAX_DEPTH + 1, id="just-over"), pytest.param(100_000, id="huge")])
def test_deep_json_is_refused(depth: int) -> None:
    with pytest.raises(SpecError, match=f"invalid JSON: nested deeper than {MAX_DEPTH} levels"):
        decode_spec("[" * depth + "]" * depth, json_text=True)


def test_json_duplicate_keys_are_refused() -> None:
    with pytest.raises(SpecError, match="invalid JSON: duplicate key 'name'"):
        decode_spec('{"name": "a", "task": {"image": "i"}, "name": "b"}', json_text=True)


def test_json_and_yaml_decode_to_the_same_spec() -> None:
    data = {"name": "same", "task": {"image": "i"}, "gpu": {"count": 2}}
    assert decode_spec(json.dumps(data), json_text=True).parse() == load_spec("name: same\ntask: {image: i}\n"
                                                                              "gpu: {count: 2}\n")


def test_an_integer_too_long_to_convert_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="^invalid YAML: Exceeds the limit"):
        load_spec("name: n\ntask: {image: i}\npriority: " + "9" * 5000 + "\n")


def grid(values_per_param: int, params: int) -> str:
    values = ", ".join(str(i) for i in range(values_per_param))
    parameters = ", ".join(f"p{i}: [{values}]" for i in range(params))
    return f"kind: sweep\nname: g\ntask: {{image: i}}\nsweep: {{parameters: {{{parameters}}}}}\n"


def test_the_trial_cap_is_a_parameter_and_located() -> None:
    assert isinstance(load_spec(grid(10, 2), max_trials=100), SweepSpec)
    with pytest.raises(SpecError, match="^line 4: sweep: the grid has 100 combinations, more than the limit of 99$"):
        load_spec(grid(10, 2), max_trials=99)


def test_the_default_cap_is_the_service_default_and_a_larger_one_is_honoured() -> None:
    with pytest.raises(SpecError, match=f"more than the limit of {MAX_TRIALS}$"):
        load_spec(grid(10, 5), max_trials=MAX_TRIALS)
    spec = load_spec(grid(10, 5), max_trials=MAX_TRIALS * 10)
    assert isinstance(spec, SweepSpec) and spec.sweep.trial_count == 100_000


def test_no_cap_is_above_the_ceiling() -> None:
    with pytest.raises(SpecError, match=f"more than the limit of {TRIALS_CEILING}$"):
        load_spec(grid(10, 6), max_trials=10 * TRIALS_CEILING)


def test_a_random_sweep_is_capped_by_its_trial_count() -> None:
    text = "kind: sweep\nname: r\ntask: {image: i}\nsweep: {parameters: {a: [1, 2, 3]}, mode: random, trials: 3}\n"
    spec = load_spec(text, max_trials=3)
    assert isinstance(spec, SweepSpec) and spec.sweep.trial_count == 3
    with pytest.raises(SpecError, match=r"^line 4: sweep: trials \(3\) is more than the limit of 2$"):
        load_spec(text, max_trials=2)


def test_an_astronomic_grid_is_refused_without_expanding() -> None:
    """2^40 combinations: refused from the product of list lengths (expanding would never end)."""
    with pytest.raises(SpecError, match="the grid has 1099511627776 combinations"):
        load_spec(grid(2, 40))


SHAPES = [
    "name: a\nteam: t\ntask: {image: busybox}\ngpu: {count: 2}\n",
    "a: 'quoted: yes'\nb: [1, 2.5, -3, 0x1f, 1e3, .inf, null, ~, true, no, 2026-12-01]\nc: |\n  block\n  text\n",
    "a: {b: {c: [d, {e: f}]}}\nkey with spaces: \"\\u00e9\\t\"\n? complex\n: value\n",
    "- just\n- a\n- list\n",
    "only a scalar\n",
    "a: 1\na: 2\n",
    "a: &x 1\nb: *x\n",
    "a: [unclosed\n",
    "a: b: c\n",
    "\t- tab\n",
]


JOBSPECS = sorted((Path(__file__).parents[2] / "jobspecs").glob("*.yaml"))


@pytest.mark.parametrize("text", SHAPES + [p.read_text() for p in JOBSPECS])
def test_libyaml_and_the_pure_python_loader_agree_on_data_and_errors(
        text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The libyaml fast path must decode exactly what the strict pure-Python loader decodes, and leave
    every refusal and error message to it."""
    from nomad_gpu.render import loading, strictyaml

    def outcome() -> object:
        try:
            return loading.decode_spec(text).data
        except SpecError as exc:
            return f"error: {exc}"

    fast = outcome()
    monkeypatch.setattr(strictyaml, "_CLoader", None)
    assert fast == outcome()


def test_the_libyaml_path_is_taken_for_a_plain_spec() -> None:
    from nomad_gpu.render import strictyaml

    if strictyaml._CLoader is None:
        pytest.skip("PyYAML was built without libyaml")
    assert strictyaml.fast_compose("name: a\nteam: t\n") is not None
    assert strictyaml.fast_compose("a: 1\na: 2\n") is None  # a short text libyaml refuses: the slow loader's words
    with pytest.raises(yaml.YAMLError, match="anchors"):  # refused on libyaml's events, with the same words
        strictyaml.fast_compose("a: &x 1\nb: *x\n")
