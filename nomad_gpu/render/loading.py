"""Read a job spec from YAML (or a decoded JSON body) into a model, or one clear error.

A user who gets a spec wrong should see where and why in one line, e.g.
``train.yaml:14: groups[trainer].gpu.count: must be >= 1``, never a pydantic dump or a
traceback. So YAML is composed into nodes first (to keep line numbers), duplicate
keys are refused (PyYAML silently keeps the last one), and pydantic's errors are
translated into short, located messages.

This is the one reader of spec text, for the CLI and the HTTP API alike, so it is
also where hostile text stops: aliases and anchors are refused (nested aliases
expand exponentially, so no byte limit bounds what they build), nesting is capped
at :data:`MAX_DEPTH`, and JSON gets the same rules (duplicate keys, depth). The YAML
side of those rules is `strictyaml.py`.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from nomad_gpu.render import strictyaml
from nomad_gpu.render.groupspec import GpuSpec, GroupSpec, MigSpec, ResourcesSpec, ShareSpec, TaskSpec
from nomad_gpu.render.locations import format_location, name_groups
from nomad_gpu.render.spec import GROUP_FIELDS, DevSpec, JobSpec, SpecError, SweepSpec
from nomad_gpu.render.strictyaml import MAX_DEPTH
from nomad_gpu.render.sweepconfig import MAX_TRIALS_CONTEXT, RANGE_TAG, VALUES_TAG, SweepConfig
from nomad_gpu.render.textrules import SHOWN, shown

__all__ = ["MAX_DEPTH", "MAX_SPEC_BYTES", "SpecDocument", "decode_spec", "format_location", "load_spec", "parse_spec"]

MAX_SPEC_BYTES = 1 << 20
"""Larger specs are refused before parsing."""

_MODELS = (JobSpec, SweepSpec, GroupSpec, TaskSpec, ResourcesSpec, GpuSpec, MigSpec, ShareSpec, DevSpec, SweepConfig)
_KNOWN_FIELDS = sorted({name for model in _MODELS for name in model.model_fields})
"""Every field name a spec can use, for "did you mean" suggestions."""


_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


@dataclass(frozen=True)
class SpecDocument:
    """Spec text decoded into plain data; ``node`` (YAML only) lets errors carry line numbers."""

    data: Any
    node: yaml.Node | None = None
    source: str = ""

    def parse(self, *, max_trials: int | None = None) -> JobSpec | SweepSpec:
        """Validate the data into a model (see :func:`parse_spec`)."""
        return parse_spec(self.data, source=self.source, node=self.node, max_trials=max_trials)


def decode_spec(text: str, *, source: str = "", json_text: bool = False) -> SpecDocument:
    """Decode spec text (YAML, or JSON when ``json_text``) under the same rules, or raise SpecError.

    Both refuse duplicate keys and nesting deeper than :data:`MAX_DEPTH`; YAML also refuses
    aliases and anchors. An empty document is an error.
    """
    prefix = f"{source}: " if source else ""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError(f"{prefix}the spec is larger than {MAX_SPEC_BYTES} bytes")
    if json_text:
        return SpecDocument(_decode_json(text, prefix), None, source)
    try:
        fast = strictyaml.fast_compose(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{prefix}{_yaml_message(exc)}") from exc
    except (ValueError, RecursionError) as exc:
        raise SpecError(f"{prefix}invalid YAML: {str(exc).split(';')[0]}") from exc
    if fast is not None:
        node, data = fast
    else:
        try:  # the reader refuses a NUL or another character YAML forbids as it is made
            loader = strictyaml.StrictLoader(text)
        except yaml.YAMLError as exc:
            raise SpecError(f"{prefix}{_yaml_message(exc)}") from exc
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        except yaml.YAMLError as exc:
            raise SpecError(f"{prefix}{_yaml_message(exc)}") from exc
        except (ValueError, RecursionError) as exc:  # e.g. an integer longer than Python converts
            raise SpecError(f"{prefix}invalid YAML: {str(exc).split(';')[0]}") from exc
        finally:
            loader.dispose()
    if data is None:
        raise SpecError(f"{prefix}the spec is empty")
    return SpecDocument(data, node, source)


def _decode_json(text: str, prefix: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise SpecError(f"{prefix}invalid JSON: duplicate key {shown(key)}")
            out[key] = value
        return out

    if not text.strip():
        raise SpecError(f"{prefix}the spec is empty")
    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except RecursionError as exc:
        raise SpecError(f"{prefix}invalid JSON: nested deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"{prefix}invalid JSON: {exc}") from exc
    if _depth(data) > MAX_DEPTH:
        raise SpecError(f"{prefix}invalid JSON: nested deeper than {MAX_DEPTH} levels")
    return data


def _depth(value: Any) -> int:
    """Nesting depth of decoded JSON, without recursion (the input may be hostile)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def load_spec(path_or_text: str | os.PathLike[str], *, max_trials: int | None = None) -> JobSpec | SweepSpec:
    """Load a job or sweep spec from a file or from YAML text.

    A ``Path`` (any ``os.PathLike``) is read as a file, and so is a one-line ``str``
    ending in ``.yaml``/``.yml``; any other ``str`` is the YAML text itself.
    Raises :class:`SpecError` (one line, prefixed with the file and/or line) on any problem.
    """
    source = ""
    if isinstance(path_or_text, os.PathLike) or ("\n" not in path_or_text and path_or_text.endswith((".yaml", ".yml"))):
        path = Path(path_or_text)
        source = path.name
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        if len(raw) > MAX_SPEC_BYTES:
            raise SpecError(f"{source}: larger than {MAX_SPEC_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    else:
        text = str(path_or_text)
    return decode_spec(text, source=source).parse(max_trials=max_trials)


def parse_spec(
    data: object, *, source: str = "", node: yaml.Node | None = None, max_trials: int | None = None
) -> JobSpec | SweepSpec:
    """Validate an already decoded spec (a YAML or JSON mapping) into a model.

    ``kind`` picks the model: ``job`` (the default) or ``sweep``. ``node``, when the
    data came from YAML, lets errors carry line numbers. ``max_trials`` caps a sweep's
    trial count, computed before anything is expanded (default: ``TRIALS_CEILING``).
    """
    if not isinstance(data, Mapping):
        prefix = f"{source}: " if source else ""
        raise SpecError(f"{prefix}the spec must be a mapping of fields, not a {_kind_of(data)}")
    kind = data.get("kind", "job")
    model: type[JobSpec] | type[SweepSpec]
    if kind == "job":
        model = JobSpec
    elif kind == "sweep":
        model = SweepSpec
    else:
        where = _where(source, node, ("kind",))
        raise SpecError(f"{where}kind: must be 'job' or 'sweep', got {shown(kind)}")
    try:
        context = {MAX_TRIALS_CONTEXT: max_trials} if max_trials is not None else None
        return model.model_validate(dict(data), context=context)
    except ValidationError as exc:
        shorthand = "task" in data
        located = [_message(error, source, node, shorthand, data) for error in exc.errors()]
        messages = tuple(text for _, text in sorted(located, key=lambda m: m[0]))  # as written, top to bottom
        raise spec_error(messages) from exc


def spec_error(messages: Sequence[str]) -> SpecError:
    """One :class:`SpecError` for several located messages: every one of them, joined by "; " into the one
    line the CLI prints and the API's `error` carries (a user fixes every typo in one pass), and listed one
    by one in ``errors`` (the API's `errors`)."""
    return SpecError("; ".join(messages), errors=tuple(messages))


def _message(error: ErrorDetails, source: str, node: yaml.Node | None, shorthand: bool, data: Mapping[str, Any]
             ) -> tuple[int, str]:
    """The line (0 without YAML) and the located message."""
    loc = [part for part in error["loc"] if part not in ("[key]", VALUES_TAG, RANGE_TAG)]
    if shorthand and loc[:2] == ["groups", 0] and (len(loc) == 2 or loc[2] in GROUP_FIELDS):
        loc = loc[2:]  # the user wrote `gpu:` at the top level, so say `gpu`, not `groups[main].gpu`
    where = _where(source, node, loc)  # the YAML nodes are found by index
    text = _describe(error)
    location = format_location(name_groups(loc, data))
    line = _line_of(node, loc) if node is not None else 0
    return line, f"{where}{location}: {text}" if location else f"{where}{text}"


def _describe(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        unknown = str(error["loc"][-1]) if error["loc"] else ""
        close = difflib.get_close_matches(unknown, _KNOWN_FIELDS, n=1) if len(unknown) <= SHOWN else []
        return "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {op} {bound}"
    if kind in ("too_short", "string_too_short"):
        return "must not be empty" if ctx.get("min_length") == 1 else f"needs at least {ctx.get('min_length')}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {shown(error.get('input'))}"
    simple = {
        "string_type": "must be a string",
        "int_type": "must be an integer",
        "int_from_float": "must be a whole number",
        "int_parsing": "must be an integer",
        "float_type": "must be a number",
        "float_parsing": "must be a number",
        "finite_number": "must be a finite number",
        "bool_type": "must be true or false",
        "list_type": "must be a list",
        "dict_type": "must be a mapping",
        "model_type": "must be a mapping",
        "model_attributes_type": "must be a mapping",
    }
    if kind in simple:
        return simple[kind]
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message.replace("\n", " ")


def _where(source: str, node: yaml.Node | None, loc: Sequence[int | str]) -> str:
    """``train.yaml:14: ``, ``line 14: `` (YAML text) or ``train.yaml: ``, or nothing."""
    line = _line_of(node, loc) if node is not None else None
    if source and line is not None:
        return f"{source}:{line}: "
    if line is not None:
        return f"line {line}: "
    return f"{source}: " if source else ""


def _line_of(node: yaml.Node, loc: Sequence[int | str]) -> int:
    """The line of the deepest YAML node on ``loc`` that exists (1-based)."""
    line: int = node.start_mark.line + 1
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == part:
                    child = value_node
                    line = key_node.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    text = f"{context}: {problem}" if context and "duplicate" not in str(problem) else str(problem)
    text = " ".join(text.split())
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {text}"
    return f"invalid YAML: {text}"


def _kind_of(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
