"""Every patterned text of a spec is refused in linear time (issue 31, item 2).

`gpu_memory: "1" + 96,000 spaces + "!"` took 43.6 s to refuse, and the service answered nothing else
meanwhile (Python's `re` holds the GIL while it backtracks): the size's pattern had two `\\s*` around an
optional unit, so each split of the spaces was tried, a cost that grows with the square of the length.
Each field here gets a value of about 1 MiB (as large as a body may be) shaped to hurt its pattern, and
must be refused, naming the field and its cap, within 0.1 s of CPU: the bound the issue sets.
"""

from __future__ import annotations

import gc
import json
import time
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pydantic import BaseModel

from nomad_gpu.render import SpecError
from nomad_gpu.render.hcl import hcl_string
from nomad_gpu.render.loading import _MODELS, MAX_SPEC_BYTES, decode_spec

SIZE = MAX_SPEC_BYTES - 4096
"""About 1 MiB: the largest value a spec under the body limit can carry."""
CPU_BOUND_S = 0.1


def hostile(size: int = SIZE) -> dict[str, str]:
    """Shapes that make backtracking patterns slow: long runs a quantifier can split many ways, then a
    character that fails the match at the very end."""
    half = size // 2
    return {
        "spaces": "1" + " " * (size - 2) + "!",
        "leading-spaces": " " * (size - 2) + "1!",
        "digits": "1" * (size - 1) + "!",
        "decimal": "1." + "1" * (size - 3) + "!",
        "units": "1s" * (half - 1) + "!",
        "spaced-units": "1h " * (size // 3 - 1) + "!",
        "letters": "a" * (size - 1) + "!",
        "name-chars": "a-" * (half - 1) + "!",
        "profile": "1g." + "1" * (size - 4) + "!",
    }


def base() -> dict[str, Any]:
    return {"name": "x", "class": "training", "gpu_memory": 10, "task": {"image": "busybox"}}


def grouped() -> dict[str, Any]:
    return {"name": "x", "groups": [{"name": "g", "task": {"image": "busybox"}}]}


def sweep() -> dict[str, Any]:
    return {"kind": "sweep", "name": "x", "task": {"image": "busybox"}, "sweep": {"parameters": {"lr": [1, 2]}}}


def setting(make: Callable[[], dict[str, Any]], *path: str | int) -> Callable[[str], dict[str, Any]]:
    """A spec whose value at ``path`` is the given text."""
    def build(value: str) -> dict[str, Any]:
        doc = make()
        node: Any = doc
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
        node[path[-1]] = value
        return doc
    return build


def keyed(make: Callable[[], dict[str, Any]], *path: str) -> Callable[[str], dict[str, Any]]:
    """A spec whose mapping at ``path`` has the given text as a key."""
    def build(value: str) -> dict[str, Any]:
        doc = make()
        node: Any = doc
        for part in path:
            node = node.setdefault(part, {})
        node.clear()
        node[value] = "1" if path[-1] != "parameters" else [1, 2]
        return doc
    return build


def mig(value: str) -> dict[str, Any]:
    doc = base()
    del doc["gpu_memory"], doc["class"]
    doc["mig"] = {"profile": value}
    return doc


FIELDS = {
    "name": setting(base, "name"),
    "team": setting(base, "team"),
    "namespace": setting(base, "namespace"),
    "node_pool": setting(base, "node_pool"),
    "template": setting(base, "template"),
    "after[0]": lambda v: {**base(), "after": [v]},
    "groups[0].name": setting(grouped, "groups", 0, "name"),
    "task.driver": setting(base, "task", "driver"),
    "task.env key": keyed(base, "task", "env"),
    "meta key": keyed(base, "meta"),
    "mig.profile": mig,
    "sweep.parameters key": keyed(sweep, "sweep", "parameters"),
    "gpu.models[0]": lambda v: {**base(), "gpu_memory": None, "gpu": {"models": [v]}},
    "gpu_memory": setting(base, "gpu_memory"),
    "runtime": setting(base, "runtime"),
    "max_runtime": setting(base, "max_runtime"),
    "ports key": lambda v: {**base(), "ports": {v: {}}},
    "service.name": lambda v: {**base(), "ports": {"http": {}}, "service": {"name": v, "port": "http"}},
    "service.port": lambda v: {**base(), "ports": {"http": {}}, "service": {"name": "chat", "port": v}},
    "service.tags[0]": lambda v: {**base(), "ports": {"http": {}},
                                  "service": {"name": "chat", "port": "http", "tags": [v]}},
    "service.check.interval": lambda v: {**base(), "ports": {"http": {}},
                                         "service": {"name": "chat", "port": "http",
                                                     "check": {"type": "tcp", "interval": v}}},
}
"""Every text of a spec that a pattern reads (the test below checks that none is missing)."""


@contextmanager
def cpu_of_this_thread() -> Iterator[list[float]]:
    """The CPU this thread spends inside, garbage collection paused: the cost of the code measured, not of
    another test's server thread in this process or of collecting what earlier tests left (either put a
    0.35 s spike into a full run's figure once)."""
    spent = [0.0]
    collecting = gc.isenabled()
    gc.disable()
    started = time.thread_time()
    try:
        yield spent
    finally:
        spent[0] = time.thread_time() - started
        if collecting:
            gc.enable()


def refusal(text: str, *, json_text: bool) -> tuple[str, float]:
    with cpu_of_this_thread() as spent, pytest.raises(SpecError) as caught:
        decode_spec(text, json_text=json_text).parse()
    return str(caught.value), spent[0]


def cases() -> Iterator[Any]:
    for field in FIELDS:
        for shape in hostile(16):
            yield pytest.param(field, shape, id=f"{field}-{shape}")


@pytest.mark.parametrize(("field", "shape"), list(cases()))
def test_a_megabyte_of_hostile_text_is_refused_within_the_cpu_bound(field: str, shape: str) -> None:
    text = json.dumps(FIELDS[field](hostile()[shape]))
    assert len(text.encode()) <= MAX_SPEC_BYTES
    message, spent = refusal(text, json_text=True)
    assert spent < CPU_BOUND_S, f"{field} ({shape}): {spent:.3f} s of CPU"
    assert "at most" in message and "characters" in message, message
    assert len(message) < 300, message[:300]  # the megabyte is never echoed back


@pytest.mark.parametrize("field", list(FIELDS))
def test_the_yaml_reader_refuses_them_as_quickly(field: str) -> None:
    message, spent = refusal(json.dumps(FIELDS[field](hostile()["spaces"])), json_text=False)
    assert spent < CPU_BOUND_S, f"{field}: {spent:.3f} s of CPU"
    assert len(message) < 300, message[:300]


@pytest.mark.parametrize(("field", "cap"), [
    pytest.param("name", 48, id="name"),
    pytest.param("team", 64, id="team"),
    pytest.param("task.env key", 128, id="env-key"),
    pytest.param("mig.profile", 18, id="mig-profile"),
    pytest.param("gpu_memory", 64, id="gpu-memory"),
    pytest.param("gpu.models[0]", 256, id="gpu-models"),
    pytest.param("runtime", 64, id="runtime"),
])
def test_the_refusal_names_the_field_and_the_cap(field: str, cap: int) -> None:
    message, _ = refusal(json.dumps(FIELDS[field]("1" + " " * 96_000 + "!")), json_text=True)
    where = field.split(" key")[0]
    assert message.startswith(where) and f"at most {cap} characters, got 96002" in message, message


@pytest.mark.parametrize("value", ["14GiB", " 14 GiB ", "9.75GiB", "14336MiB", "15 GB"])
def test_sizes_as_written_still_read(value: str) -> None:
    spec = decode_spec(json.dumps(FIELDS["gpu_memory"](value)), json_text=True).parse()
    assert spec.groups[0].gpu_memory == value


@pytest.mark.parametrize(("value", "seconds"), [("90s", 90), ("1h30m", 5400), ("1h 30m", 5400), (" 2d ", 172800),
                                                ("1.5h", 5400), ("3600", 3600), ("4H", 14400)])
def test_durations_as_written_still_read(value: str, seconds: float) -> None:
    spec = decode_spec(json.dumps(FIELDS["runtime"](value)), json_text=True).parse()
    assert spec.runtime == seconds


@pytest.mark.parametrize("value", ["1h30", "1 h", "h", "1x", "1h3 0m", "", "1.h"])
def test_malformed_durations_are_still_refused(value: str) -> None:
    with pytest.raises(SpecError, match="runtime: must be a duration"):
        decode_spec(json.dumps(FIELDS["runtime"](value)), json_text=True).parse()


def test_an_unknown_megabyte_key_or_literal_is_not_echoed() -> None:
    for doc in ({**base(), "x" * SIZE: 1}, {**base(), "class": "x" * SIZE}, {**base(), "kind": "x" * SIZE}):
        message, spent = refusal(json.dumps(doc), json_text=True)
        assert len(message) < 300 and spent < CPU_BOUND_S, message[:300]


def test_hcl_strings_escape_in_linear_time() -> None:
    """Every `${` of an env value was followed by a search of the rest of the text for `}`: quadratic in a
    run of them (a spec of 1 MiB can be rendered by `nomad-gpu render`; the service renders at most a
    stored spec's 256 KiB). A clearly generous bound of 2 s of CPU for 1 MiB: 9.8 s before, 0.3 s now."""
    value = "${" * (MAX_SPEC_BYTES // 2)
    with cpu_of_this_thread() as spent:
        out = hcl_string(value)
    assert spent[0] < 2.0
    assert out.count("\\u0024") == len(value) // 2  # no `}` anywhere: each `$` written as an escape
    assert hcl_string("${a}${") == '"$${a}\\u0024{"' and hcl_string("${a") == '"\\u0024{a"'


def _rules(annotation: Any) -> Iterator[Any]:
    """The text rules the validators in ``annotation`` apply, through Annotated, unions, lists and maps."""
    from nomad_gpu.render.textrules import TextRule

    for arg in typing.get_args(annotation):
        yield from _rules(arg)
    for meta in getattr(annotation, "__metadata__", ()):
        rule = getattr(getattr(meta, "func", None), "__self__", None)
        if isinstance(rule, TextRule):
            yield rule
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for info in annotation.model_fields.values():
            yield from _rules(info.annotation)
            for meta in info.metadata:
                yield from _rules(typing.Annotated[Any, meta])


def test_every_patterned_field_is_in_the_table() -> None:
    wanted = {rule.what for model in _MODELS for rule in _rules(model)}
    covered = set()
    for build in FIELDS.values():
        for probe in ("!", "\x01"):  # a tag takes "!" (any printable text) but not a control character
            try:
                decode_spec(json.dumps(build(probe)), json_text=True).parse()
            except SpecError as refused:  # a model name has no pattern, only a cap: "!" is one
                covered |= {what for what in wanted if what in str(refused)}
    assert wanted and wanted <= covered, sorted(wanted - covered)
