"""Typed, strict access to python-hcl2's output for one HCL body (the inside of a block).

python-hcl2 keeps HCL's surface syntax in its output: string values and block labels keep their
quotes and escapes (`'"x"'`), blocks are lists of dicts marked `__is_block__` (a labelled block nests
one dict per label), and non-literal expressions come back unquoted (`'${10 * 2}'`). This module
turns that into plain values, and remembers which keys were read so that `finish()` can refuse
every attribute or block nobody asked for: the dev cluster never half-understands a jobspec.
"""

from __future__ import annotations

import re
from typing import Any

JSON = dict[str, Any]

_ESCAPE_RE = re.compile(r'\\(["\\nrt]|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})|\$\$\{|%%\{')
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


class HclError(ValueError):
    """The jobspec cannot be mapped; the message is what follows `Failed to parse job: `."""


class Body:
    """One HCL body (the inside of a block): typed access to its attributes and nested blocks, and
    an error for whatever was not asked for (`finish`), so unknown stanzas are never ignored."""

    def __init__(self, raw: dict[str, Any], path: str) -> None:
        self._raw = {key: value for key, value in raw.items() if key != "__is_block__"}
        self._path = path
        self._used: set[str] = set()

    def _fail(self, message: str) -> HclError:
        return HclError(f"{self._path}: {message}")

    def _take(self, name: str) -> Any:
        self._used.add(name)
        return self._raw.get(name)

    def blocks(self, name: str, labels: int) -> list[tuple[tuple[str, ...], Body]]:
        value = self._take(name)
        if value is None:
            return []
        if not _is_block_list(value):
            raise self._fail(f'Unsupported argument; "{name}" must be written as a block')
        out: list[tuple[tuple[str, ...], Body]] = []
        for item in value:
            found: list[str] = []
            while "__is_block__" not in item:
                if len(item) != 1 or not isinstance(next(iter(item.values())), dict):
                    raise self._fail(f'malformed "{name}" block')
                label, item = next(iter(item.items()))
                found.append(_unquote(label))
            if len(found) != labels:
                raise self._fail(f'Block "{name}" needs {labels} label(s), found {len(found)}')
            where = f'{name} "{found[0]}"' if found else name
            out.append((tuple(found), Body(item, f"{self._path} -> {where}")))
        seen = [labels_ for labels_, _ in out if labels_]
        duplicates = {label for label in seen if seen.count(label) > 1}
        if duplicates:
            raise self._fail(f'Duplicate {name} block "{sorted(duplicates)[0][0]}"')
        return out

    def single_block(self, name: str) -> Body | None:
        found = self.blocks(name, 0)
        if len(found) > 1:
            raise self._fail(f'Duplicate {name} block; only one is allowed here')
        return found[0][1] if found else None

    def _attribute(self, name: str) -> Any:
        value = self._take(name)
        if _is_block_list(value):
            raise self._fail(f'Unsupported block type; "{name}" is an argument, not a block')
        return None if value is None else _literal(value, f"{self._path}.{name}")

    def string(self, name: str) -> str | None:
        value = self._attribute(name)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        raise self._fail(f'Incorrect attribute value type; "{name}" must be a string')

    def integer(self, name: str) -> int | None:
        value = self._attribute(name)
        if value is None:
            return None
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise self._fail(f'Incorrect attribute value type; "{name}" must be a whole number')

    def boolean(self, name: str) -> bool | None:
        value = self._attribute(name)
        if value is None or isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return bool(value == "true")
        raise self._fail(f'Incorrect attribute value type; "{name}" must be a bool')

    def duration(self, name: str) -> int | None:
        text = self.string(name)
        if text is None:
            return None
        if text == "0":
            return 0
        parts = _DURATION_RE.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise self._fail(f'"{name}" is not a duration like "30s" or "1h30m": {text!r}')
        return int(sum(float(number) * _DURATION_NS[unit] for number, unit in parts))

    def string_list(self, name: str) -> list[str] | None:
        value = self._attribute(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(f'Incorrect attribute value type; "{name}" must be a list of strings')
        return value

    def string_map(self, name: str) -> dict[str, str] | None:
        """`meta`/`env`: either a block of attributes or a map-valued argument."""
        value = self._take(name)
        if value is None:
            return None
        if _is_block_list(value):
            if len(value) != 1:
                raise self._fail(f"Duplicate {name} block; only one is allowed here")
            body = Body(value[0], f"{self._path} -> {name}")
            value = {key: body._attribute(key) for key in body._raw}
        else:
            value = _literal(value, f"{self._path}.{name}")
        if not isinstance(value, dict):
            raise self._fail(f'Incorrect attribute value type; "{name}" must be a map of strings')
        out = {}
        for key, item in value.items():
            if isinstance(item, dict | list) or item is None:
                raise self._fail(f'"{name}.{key}" must be a string')
            out[key] = ("true" if item else "false") if isinstance(item, bool) else str(item)
        return out

    def attribute_names(self) -> list[str]:
        """The names written in this body (a block whose attribute names are data, like a check's header)."""
        return [_unquote(key) for key in self._raw]

    def passthrough(self) -> JSON:
        """A driver `config` body: any keys; nested blocks become lists of objects, as in Nomad."""
        self._used.update(self._raw)
        return {key: _passthrough(value, f"{self._path}.{key}") for key, value in self._raw.items()}

    def finish(self) -> None:
        unknown = sorted(set(self._raw) - self._used)
        if unknown:
            name = _unquote(unknown[0])
            value = self._raw[unknown[0]]
            if _is_block_list(value):
                raise self._fail(f'Unsupported block type; Blocks of type "{name}" are not expected here.')
            raise self._fail(f'Unsupported argument; An argument named "{name}" is not expected here.')


def _is_block_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_block(item) for item in value)


def _is_block(item: Any) -> bool:
    while isinstance(item, dict):
        if "__is_block__" in item:
            return True
        if len(item) != 1:
            return False
        item = next(iter(item.values()))
    return False


def _passthrough(value: Any, path: str) -> Any:
    if _is_block_list(value):
        return [_passthrough_block(item, path) for item in value]
    return _literal(value, path)


def _passthrough_block(item: dict[str, Any], path: str) -> Any:
    if "__is_block__" in item:
        return {key: _passthrough(v, f"{path}.{key}") for key, v in item.items() if key != "__is_block__"}
    label, inner = next(iter(item.items()))
    return {_unquote(label): _passthrough_block(inner, path)}


def _literal(value: Any, path: str) -> Any:
    """A python-hcl2 value to plain JSON; only literals (and `${}` inside quoted strings) pass."""
    if isinstance(value, str):
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            return _unescape(value[1:-1])
        raise HclError(f"{path}: Unsupported expression {value!r}; the dev cluster accepts literal values "
                       "only (quote the string; `${...}` inside quotes is kept verbatim)")
    if isinstance(value, list):
        return [_literal(item, path) for item in value]
    if isinstance(value, dict):
        if "__is_block__" in value:
            raise HclError(f"{path}: a block is not allowed here")
        return {_unquote(key): _literal(item, f"{path}.{_unquote(key)}") for key, item in value.items()}
    return value


def _unquote(text: str) -> str:
    if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
        return _unescape(text[1:-1])
    return text


def _unescape(text: str) -> str:
    if "\\" not in text and "$${" not in text and "%%{" not in text:
        return text  # nothing _ESCAPE_RE could match: most literals, and the cheapest answer

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        if token == "%%{":
            return "%{"
        code = match.group(1)
        if code in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[code]
        return chr(int(code[1:], 16))

    return _ESCAPE_RE.sub(replace, text)
