"""`POST /v1/jobs/parse` for the dev cluster: HCL2 jobspec text to Nomad's (uncanonicalized) Job JSON.

Nomad parses HCL with its own jobspec2 package; we cannot run it, so this maps the small subset of
stanzas our templates render (DESIGN.md 3.7) with python-hcl2, and refuses everything else with a
clear 400 `Failed to parse job: ...` (reference section 6), so a template that drifts beyond what the
dev cluster understands fails loudly instead of being half-understood.

python-hcl2 quirks handled here: string values and block labels keep their quotes and escapes
(`'"x"'`), blocks are lists of dicts marked `__is_block__` (labelled blocks nest one dict per label),
and non-literal expressions come back unquoted (`'${10 * 2}'`). `${...}` *inside* a quoted string
(`"${node.unique.id}"`, `"${device.ids}"`) is kept verbatim, as Nomad keeps it for runtime
interpolation.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions

JSON = dict[str, Any]

_OPTIONS = SerializationOptions(with_comments=False, preserve_heredocs=False)
# python-hcl2 shares one lazily built grammar; parsing is quick but serialise it to be safe.
_PARSE_LOCK = threading.Lock()
_ESCAPE_RE = re.compile(r'\\(["\\nrt]|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})|\$\$\{|%%\{')
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


class HclError(ValueError):
    """The jobspec cannot be mapped; the message is what follows `Failed to parse job: `."""


def warm_up() -> None:
    """Build python-hcl2's grammar now (the first parse takes a while) rather than on a request."""
    parse_job_hcl('job "warm-up" {\n  group "g" {\n    task "t" {\n      driver = "exec"\n    }\n  }\n}\n')


def parse_job_hcl(text: str) -> JSON:
    """Parse one `job` block into Job JSON with Nomad's field names; unset fields are null."""
    with _PARSE_LOCK:
        try:
            tree = hcl2.loads(text, serialization_options=_OPTIONS)
        except Exception as exc:  # lark raises a family of errors; all of them are syntax errors
            line, column = getattr(exc, "line", None), getattr(exc, "column", None)
            where = f"input.hcl:{line},{column}: " if line is not None else ""
            raise HclError(f"{where}{str(exc).strip().splitlines()[0]}") from exc
    top = _Body(tree, "input.hcl")
    jobs = top.blocks("job", 1)
    top.finish()
    if len(jobs) != 1:
        raise HclError(f"input.hcl: exactly one job block is required, found {len(jobs)}")
    (job_id,), body = jobs[0]
    return _job(job_id, body)


def _job(job_id: str, body: _Body) -> JSON:
    groups = [_group(name, group) for (name,), group in body.blocks("group", 1)]
    job = {
        "Region": body.string("region"),
        "Namespace": body.string("namespace"),
        "ID": job_id,
        "Name": job_id,
        "Type": body.string("type"),
        "Priority": body.integer("priority"),
        "AllAtOnce": None,
        "Datacenters": body.string_list("datacenters"),
        "NodePool": body.string("node_pool"),
        "Constraints": _constraints(body),
        "Affinities": None,
        "Spreads": None,
        "TaskGroups": groups,
        "Update": None,
        "Periodic": None,
        "ParameterizedJob": None,
        "Reschedule": None,
        "Meta": body.string_map("meta"),
        "Stop": None,
        "ParentID": None,
        "Dispatched": False,
        "Payload": None,
        "Status": None,
        "StatusDescription": None,
        "Version": None,
        "SubmitTime": None,
        "CreateIndex": None,
        "ModifyIndex": None,
        "JobModifyIndex": None,
    }
    body.finish()
    return job


def _group(name: str, body: _Body) -> JSON:
    restart = body.single_block("restart")
    reschedule = body.single_block("reschedule")
    group = {
        "Name": name,
        "Count": body.integer("count"),
        "Constraints": _constraints(body),
        "Affinities": None,
        "Spreads": None,
        "Tasks": [_task(task_name, task) for (task_name,), task in body.blocks("task", 1)],
        "RestartPolicy": None if restart is None else {
            "Interval": restart.duration("interval"),
            "Attempts": restart.integer("attempts"),
            "Delay": restart.duration("delay"),
            "Mode": restart.string("mode"),
            "RenderTemplates": None,
        },
        "ReschedulePolicy": None if reschedule is None else {
            "Attempts": reschedule.integer("attempts"),
            "Interval": None,
            "Delay": None,
            "DelayFunction": None,
            "MaxDelay": None,
            "Unlimited": reschedule.boolean("unlimited"),
        },
        "EphemeralDisk": None,
        "Networks": None,
        "Meta": body.string_map("meta"),
        "Services": None,
    }
    for block in (restart, reschedule):
        if block is not None:
            block.finish()
    body.finish()
    return group


def _task(name: str, body: _Body) -> JSON:
    resources = body.single_block("resources")
    config = body.single_block("config")
    task = {
        "Name": name,
        "Driver": body.string("driver"),
        "User": None,
        "Config": None if config is None else config.passthrough(),
        "Constraints": None,
        "Affinities": None,
        "Env": body.string_map("env"),
        "Services": None,
        "Resources": None if resources is None else _resources(resources),
        "RestartPolicy": None,
        "Meta": body.string_map("meta"),
        "KillTimeout": body.duration("kill_timeout"),
        "LogConfig": None,
        "Artifacts": None,
        "Templates": None,
        "Leader": False,
        "KillSignal": "",
        "Kind": "",
    }
    body.finish()
    return task


def _resources(body: _Body) -> JSON:
    devices = []
    for (device_name,), device in body.blocks("device", 1):
        devices.append({
            "Name": device_name,
            "Count": device.integer("count"),
            "Constraints": _constraints(device),
            "Affinities": _affinities(device),
        })
        device.finish()
    resources = {
        "CPU": body.integer("cpu"),
        "Cores": None,
        "MemoryMB": body.integer("memory"),
        "MemoryMaxMB": body.integer("memory_max"),
        "DiskMB": None,
        "Networks": None,
        "Devices": devices or None,
    }
    body.finish()
    return resources


def _constraints(body: _Body) -> list[JSON] | None:
    out = []
    for _, block in body.blocks("constraint", 0):
        out.append({
            "LTarget": block.string("attribute") or "",
            "RTarget": block.string("value") or "",
            "Operand": block.string("operator") or "=",
        })
        block.finish()
    return out or None


def _affinities(body: _Body) -> list[JSON] | None:
    out = []
    for _, block in body.blocks("affinity", 0):
        weight = block.integer("weight")
        out.append({
            "LTarget": block.string("attribute") or "",
            "RTarget": block.string("value") or "",
            "Operand": block.string("operator") or "=",
            "Weight": 50 if weight is None else weight,
        })
        block.finish()
    return out or None


class _Body:
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

    def blocks(self, name: str, labels: int) -> list[tuple[tuple[str, ...], _Body]]:
        value = self._take(name)
        if value is None:
            return []
        if not _is_block_list(value):
            raise self._fail(f'Unsupported argument; "{name}" must be written as a block')
        out: list[tuple[tuple[str, ...], _Body]] = []
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
            out.append((tuple(found), _Body(item, f"{self._path} -> {where}")))
        seen = [labels_ for labels_, _ in out if labels_]
        duplicates = {label for label in seen if seen.count(label) > 1}
        if duplicates:
            raise self._fail(f'Duplicate {name} block "{sorted(duplicates)[0][0]}"')
        return out

    def single_block(self, name: str) -> _Body | None:
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
            body = _Body(value[0], f"{self._path} -> {name}")
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
