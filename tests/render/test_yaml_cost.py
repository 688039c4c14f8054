"""A bad YAML spec costs one parse (issue 26, item 6): a 949 KB one cost ~9 s of CPU because libyaml
failed and the pure-Python loader parsed the whole text again for its message. Counted, not timed:
how often the slow loader runs."""

from __future__ import annotations

from typing import Any

import pytest

from nomad_gpu.render import SpecError, strictyaml
from nomad_gpu.render.loading import decode_spec


@pytest.fixture
def slow_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made: list[int] = []
    real = strictyaml.StrictLoader

    class Counted(real):  # type: ignore[misc,valid-type]
        def __init__(self, stream: str) -> None:
            made.append(len(stream))
            super().__init__(stream)

    monkeypatch.setattr(strictyaml, "StrictLoader", Counted)
    return made


def big_bad(entries: int) -> str:
    env = "\n".join(f"    K{i}: value-{i}" for i in range(entries))
    return f"name: x\ntask:\n  image: i\n  env:\n{env}\n  args: [unclosed\n"


def test_a_large_bad_spec_is_refused_on_libyamls_error_without_a_second_parse(slow_loads: list[int]) -> None:
    text = big_bad(40_000)
    assert len(text) > 900_000
    with pytest.raises(SpecError, match="line"):
        decode_spec(text)
    assert slow_loads == []


def test_a_small_bad_spec_still_gets_the_detailed_message(slow_loads: list[int]) -> None:
    with pytest.raises(SpecError, match="line"):
        decode_spec(big_bad(3))
    assert len(slow_loads) == 1


def test_aliases_in_a_large_spec_are_still_refused_by_name(slow_loads: Any) -> None:
    text = big_bad(40_000).replace("args: [unclosed", "args: &a [x]\n  command: *a")
    with pytest.raises(SpecError, match="anchors|aliases"):
        decode_spec(text)
