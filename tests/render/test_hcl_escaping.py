"""The one escaping function, its inverse, and the environment that cannot skip it."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nomad_gpu.render import JobRenderer, RenderError, decode_hcl_string, hcl_literal, hcl_string, parse_hcl
from nomad_gpu.render.hcl import HclIdent, hcl_ident

from .hclview import text

# Pieces that break naive escaping: string ends, escapes, template sequences (closed,
# unclosed, already doubled), comment and heredoc starters, and invisible characters.
FRAGMENTS = [
    "${", "%{", "$${", "%%{", "$$", "%%", "}", "{", "${x}", "${var.x}", "%{ if true }y%{ endif }",
    "~}", "${~", '"', "\\", "\\n", "\\u0024{", "\n", "\r\n", "\r", "\t", "$", "%", "\x00", "\x1b",
    "\x7f", "\u2028", "\u0085", "\ufeff", "\u200b", "é", "😀", "<<EOF\n", "EOF", "#", "//", "/*", "*/",
    " = ", "'", "`",
]  # fmt: skip
hostile_text = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(FRAGMENTS)), max_size=10).map("".join)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        pytest.param("plain", '"plain"', id="plain"),
        pytest.param("", '""', id="empty"),
        pytest.param('say "hi"', '"say \\"hi\\""', id="quotes"),
        pytest.param("a\\b", '"a\\\\b"', id="backslash"),
        pytest.param("l1\nl2\r\tx", '"l1\\nl2\\r\\tx"', id="newline-cr-tab"),
        pytest.param("${node.unique.id}", '"$${node.unique.id}"', id="interpolation-doubled"),
        pytest.param("%{ if x }y%{ endif }", '"%%{ if x }y%%{ endif }"', id="directive-doubled"),
        pytest.param("$${x}", '"$$${x}"', id="already-doubled-stays-literal"),
        pytest.param("$5 and 100%", '"$5 and 100%"', id="lone-dollar-percent"),
        pytest.param("a${", '"a\\u0024{"', id="unclosed-interpolation"),
        pytest.param("x%{", '"x\\u0025{"', id="unclosed-directive"),
        pytest.param("}${", '"}\\u0024{"', id="brace-before-does-not-close"),
        pytest.param("\x00\x1b\x7f", '"\\u0000\\u001b\\u007f"', id="control"),
        pytest.param("\u2028\ufeff", '"\\u2028\\ufeff"', id="unicode-separators"),
        pytest.param("\U000e0001", '"\\U000e0001"', id="astral-non-printable"),
        pytest.param("é😀", '"é😀"', id="printable-unicode-raw"),
    ],
)
def test_hcl_string_encodes_like_hclwrite(value: str, encoded: str) -> None:
    assert hcl_string(value) == encoded
    assert decode_hcl_string(encoded) == value


@pytest.mark.parametrize(
    ("source", "value"),
    [
        pytest.param('"$${a}"', "${a}", id="escaped-interpolation"),
        pytest.param('"$$${a}"', "$${a}", id="dollar-then-escape"),
        pytest.param('"%%{a}"', "%{a}", id="escaped-directive"),
        pytest.param('"$$"', "$$", id="double-dollar-without-brace"),
        pytest.param('"\\u0024{a}"', "${a}", id="unicode-escape-is-literal"),
        pytest.param('"\\U0001F600"', "😀", id="long-unicode-escape"),
        pytest.param('"a\\\\$${b}"', "a\\${b}", id="escaped-backslash-then-escape"),
    ],
)
def test_decode_follows_the_hcl2_spec(source: str, value: str) -> None:
    assert decode_hcl_string(source) == value


@pytest.mark.parametrize(
    "source",
    [
        pytest.param('"${a}"', id="live-interpolation"),
        pytest.param('"%{ if a }"', id="live-directive"),
        pytest.param('"a"b"', id="bare-quote"),
        pytest.param('"a\\qb"', id="unknown-escape"),
        pytest.param('"\\ud800"', id="surrogate-escape"),
        pytest.param('"\\u12"', id="short-unicode-escape"),
        pytest.param("plain", id="unquoted"),
    ],
)
def test_decode_refuses_what_is_not_a_plain_literal(source: str) -> None:
    with pytest.raises(ValueError):
        decode_hcl_string(source)


def test_decode_can_keep_nomad_targets() -> None:
    assert decode_hcl_string('"${node.unique.id}"', keep_interpolations=True) == "${node.unique.id}"


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        pytest.param(True, "true", id="true"),
        pytest.param(False, "false", id="false"),
        pytest.param(42, "42", id="int"),
        pytest.param(-1, "-1", id="negative"),
        pytest.param(["a", "${b}"], '["a", "$${b}"]', id="list"),
        pytest.param((), "[]", id="empty-tuple"),
        pytest.param(HclIdent("NCCL_DEBUG"), "NCCL_DEBUG", id="ident"),
    ],
)
def test_hcl_literal_renders_supported_types(value: object, literal: str) -> None:
    assert hcl_literal(value) == literal


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(1.5, id="float"),
        pytest.param({"a": "b"}, id="mapping"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param(object(), id="object"),
    ],
)
def test_hcl_literal_refuses_everything_else(value: object) -> None:
    with pytest.raises(RenderError):
        hcl_literal(value)


def test_lone_surrogate_is_refused() -> None:
    with pytest.raises(RenderError, match="surrogate"):
        hcl_string("a\ud800")


@pytest.mark.parametrize("name", ["a b", "1abc", "a.b", "a=b", "", 'x"', "a\n"])
def test_ident_refuses_what_is_not_an_identifier(name: str) -> None:
    with pytest.raises(RenderError, match="identifier"):
        hcl_ident(name)


@given(hostile_text)
@settings(max_examples=1000)
def test_decode_inverts_encode(value: str) -> None:
    assert decode_hcl_string(hcl_string(value)) == value


@given(st.lists(hostile_text, min_size=1, max_size=3))
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_python_hcl2_reads_back_exactly_what_was_written(values: list[str]) -> None:
    """Values in an attribute, a list and a block label, followed by more structure.

    The trailing ``after`` block and closing braces are what an unbalanced ``$${``
    would swallow in python-hcl2: they must still parse as structure.
    """
    first = values[0]
    source = (
        f"a = {hcl_string(first)}\n"
        f"l = {hcl_literal(values)}\n"
        f"blk {hcl_string(first)} {{\n  x = {hcl_string(values[-1])}\n}}\n"
        'after { y = "}" }\n'
    )
    parsed = parse_hcl(source)
    assert text(parsed["a"]) == first
    assert [text(item) for item in parsed["l"]] == values
    ((label, body),) = ((k, v) for k, v in parsed["blk"][0].items() if not k.startswith("__"))
    assert text(label) == first
    assert text(body["x"]) == values[-1]
    assert text(parsed["after"][0]["y"]) == "}"


def test_unclosed_interpolation_cannot_swallow_the_next_attribute() -> None:
    # With a plain `$${` python-hcl2 would read `"$${"\nb = "}"` as ONE string.
    parsed = parse_hcl(f"a = {hcl_string('${')}\nb = {hcl_string('}')}\n")
    assert text(parsed["a"]) == "${"
    assert text(parsed["b"]) == "}"


def _renderer(tmp_path: Path, source: str) -> JobRenderer:
    (tmp_path / "t.hcl.j2").write_text(source)
    return JobRenderer(tmp_path)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("a = {{ missing }}\n", id="expression"),
        pytest.param("{% if missing %}x{% endif %}\n", id="condition"),
        pytest.param("{% for x in missing %}{% endfor %}\n", id="loop"),
        pytest.param("a = {{ present.missing }}\n", id="attribute"),
    ],
)
def test_strict_undefined_raises_on_a_missing_variable(tmp_path: Path, source: str) -> None:
    with pytest.raises(RenderError, match="missing") as info:
        _renderer(tmp_path, source).render_template("t", {"present": {}})
    assert isinstance(info.value.__cause__, jinja2.UndefinedError)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("a = {{ v }}\n", id="bare"),
        pytest.param("a = {{ v | safe }}\n", id="safe-filter"),
        pytest.param("a = {{ v | string }}\n", id="string-filter"),
        pytest.param("a = {{ v ~ '' }}\n", id="concatenation"),
        pytest.param("{% set w = v %}a = {{ w }}\n", id="set"),
    ],
)
def test_every_expression_is_escaped_whatever_the_template_does(tmp_path: Path, source: str) -> None:
    value = '"\n} evil { x = "${file("/etc/passwd")}'
    out = _renderer(tmp_path, source).render_template("t", {"v": value})
    parsed = parse_hcl(out)
    assert set(parsed) == {"a"}
    assert text(parsed["a"]) == value


def test_a_template_that_quotes_a_value_itself_does_not_parse(tmp_path: Path) -> None:
    # The mistake the finalize design turns into a loud failure instead of an injection.
    out = _renderer(tmp_path, 'a = "{{ v }}"\n').render_template("t", {"v": "x"})
    with pytest.raises(RenderError, match="does not parse"):
        parse_hcl(out)


def test_a_value_of_an_unsupported_type_fails_the_render(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="template 't'.*float"):
        _renderer(tmp_path, "a = {{ v }}\n").render_template("t", {"v": 0.5})


def test_a_bad_key_fails_the_render(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="identifier"):
        _renderer(tmp_path, "{{ k | ident }} = 1\n").render_template("t", {"k": "a = 1\nb"})
