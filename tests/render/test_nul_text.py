"""A NUL character in any text of a spec is refused (found with issue 26, item 13): a YAML escape (`"a\\0b"`)
or a JSON one (`"a\\u0000b"`) got past the YAML reader's check, into env values and arguments that no
task can receive (execve takes C strings), so Nomad failed the task long after the submit said yes."""

from __future__ import annotations

import pytest

from nomad_gpu.render import SpecError
from nomad_gpu.render.loading import decode_spec


@pytest.mark.parametrize("text", [
    pytest.param('name: x\ntask: {image: i, env: {A: "a\\0b"}}\n', id="env-value"),
    pytest.param('name: x\ntask: {image: i, args: ["-c", "x\\0y"]}\n', id="argument"),
    pytest.param('name: x\ntask: {image: "i\\0"}\n', id="image"),
])
def test_a_nul_in_text_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="NUL"):
        decode_spec(text).parse()


def test_json_escapes_are_refused_too() -> None:
    with pytest.raises(SpecError, match="NUL"):
        decode_spec('{"name": "x", "task": {"image": "i", "env": {"A": "\\u0000"}}}', json_text=True).parse()


def test_other_text_still_passes() -> None:
    spec = decode_spec('name: x\ntask: {image: i, env: {A: "tab\\there, line\\nbreak, é"}}\n').parse()
    assert spec.groups[0].task.env["A"] == "tab\there, line\nbreak, é"
