"""HCL2 literals and the Jinja2 environment that can only emit them.

Every value a template writes reaches Nomad as HCL source, so a value that is not
encoded is an injection: a quote ends the string early, a ``${...}`` becomes a live
interpolation, a newline starts a new attribute. This module is the single place
where Python values become HCL text. The Jinja environment it builds runs EVERY
``{{ expression }}`` through :func:`hcl_literal` (its ``finalize`` hook), so a
template author cannot forget to escape: templates write values bare
(``image = {{ task.image }}``), and the only way to emit something that is not a
quoted, escaped literal is the ``ident`` filter, which validates instead of escaping.

String encoding follows hclwrite (hashicorp/hcl ``escapeQuotedStringLit``):
``\\ " \\n \\r \\t`` are backslash-escaped, non-printable characters become
``\\uNNNN``/``\\UNNNNNNNN``, ``${`` becomes ``$${`` and ``%{`` becomes ``%%{``.
One deviation, for python-hcl2 (which the dev cluster and our tests parse with):
its grammar only accepts ``$${`` as the token ``\\$\\$\\{[^}]*\\}``, i.e. it needs a
``}`` later in the SAME string, and without one it either fails or runs on past
the closing quote into the rest of the file. So a ``${`` (or ``%{``) with no ``}``
after it in the value is written ``\\u0024{`` (``\\u0025{``): HCL decodes escapes
after scanning, so every HCL2 parser reads that as the literal text, never as a
template sequence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from nomad_gpu.domain.errors import InvalidRequest

__all__ = [
    "HclIdent",
    "RenderError",
    "decode_hcl_string",
    "hcl_ident",
    "hcl_literal",
    "hcl_string",
    "make_environment",
    "parse_hcl",
]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_SIMPLE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SIMPLE_DECODES = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


class RenderError(InvalidRequest):
    """A job could not be rendered (bad template, placement or value); one line. An ``InvalidRequest``
    (so also a ``ValueError``)."""


@dataclass(frozen=True)
class HclIdent:
    """A validated HCL identifier, emitted bare (attribute names in a block body)."""

    name: str


def hcl_ident(name: object) -> HclIdent:
    """Validate ``name`` as an HCL attribute name; the template filter ``ident``."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise RenderError(f"{name!r} is not a valid HCL identifier ([A-Za-z_][A-Za-z0-9_-]*)")
    return HclIdent(name)


def hcl_string(value: str) -> str:
    """Encode ``value`` as a quoted HCL2 string literal that decodes to exactly ``value``."""
    out = ['"']
    last_close = value.rfind("}")  # found once: a search per `${` was quadratic in a run of them
    for index, char in enumerate(value):
        if char in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[char])
        elif char in "$%" and value.startswith("{", index + 1):
            if last_close >= index + 2:
                out.append(char + char)
            else:
                out.append(f"\\u{ord(char):04x}")
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            if 0xD800 <= code <= 0xDFFF:
                raise RenderError(f"lone surrogate U+{code:04X} cannot be written as UTF-8 text")
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def hcl_literal(value: Any) -> str:
    """Render one Python value as an HCL2 literal; the environment's ``finalize`` hook.

    str -> escaped quoted string, bool -> true/false, int -> decimal, a sequence ->
    a tuple of literals, :class:`HclIdent` -> the bare name. Anything else (floats,
    mappings, None, objects) is refused so that no value is written by accident.
    """
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError here, naming the variable
        raise RenderError("undefined value in template")
    if isinstance(value, HclIdent):
        return value.name
    if isinstance(value, str):
        return hcl_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return "[" + ", ".join(hcl_literal(item) for item in value) + "]"
    raise RenderError(f"cannot render a {type(value).__name__} as an HCL literal (only str, int, bool and lists)")


def decode_hcl_string(source: str, *, keep_interpolations: bool = False) -> str:
    """Decode a quoted HCL2 string literal's source text into its value.

    This is what python-hcl2 does not do: ``hcl2.loads`` returns strings in their
    source form (quotes kept, escapes and ``$${`` left as written), so a reader of
    its output (the tests, the dev cluster) decodes them here, by the HCL2 spec.
    A live ``${``/``%{`` raises, unless ``keep_interpolations`` is set, in which case
    it is copied verbatim (enough for Nomad's plain ``${node.unique.id}`` style).
    """
    if len(source) < 2 or source[0] != '"' or source[-1] != '"':
        raise ValueError(f"not a quoted HCL string: {source!r}")
    body = source[1:-1]
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            marker = body[index + 1 : index + 2]
            if marker in _SIMPLE_DECODES:
                out.append(_SIMPLE_DECODES[marker])
                index += 2
            elif marker in ("u", "U"):
                width = 4 if marker == "u" else 8
                digits = body[index + 2 : index + 2 + width]
                if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                    raise ValueError(f"bad unicode escape at offset {index} in {source!r}")
                code = int(digits, 16)
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise ValueError(f"invalid code point U+{code:X} in {source!r}")
                out.append(chr(code))
                index += 2 + width
            else:
                raise ValueError(f"invalid escape {body[index : index + 2]!r} in {source!r}")
        elif char in "$%" and body.startswith(char + char + "{", index):
            out.append(char + "{")
            index += 3
        elif char in "$%" and body.startswith(char + "{", index):
            if not keep_interpolations:
                raise ValueError(f"live template sequence {char}{{ at offset {index} in {source!r}")
            out.append(char + "{")
            index += 2
        elif char == '"' or char in "\r\n":
            raise ValueError(f"unescaped {char!r} inside {source!r}")
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _ident_filter(name: object) -> HclIdent:
    return hcl_ident(name)


def make_environment(templates_dir: Path) -> jinja2.Environment:
    """The Jinja2 environment for HCL templates: strict, and escaping by construction.

    ``finalize=hcl_literal`` encodes every expression's result; ``StrictUndefined``
    turns a missing variable into an error instead of an empty string; HTML
    autoescaping is off because it is the wrong escaping for HCL (and ``|safe``
    would only mark text as HTML-safe, which ``hcl_literal`` ignores anyway).
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        undefined=jinja2.StrictUndefined,
        finalize=hcl_literal,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["ident"] = _ident_filter
    return env


def parse_hcl(source: str) -> dict[str, Any]:
    """Parse HCL2 text with python-hcl2 (strings come back in source form, see above).

    The first call builds the grammar (about a second); later calls reuse it.
    """
    import hcl2  # deferred: building the parser is slow and only checks need it

    try:
        parsed: dict[str, Any] = hcl2.loads(source)
    except Exception as exc:  # lark raises several unrelated types; all mean "not HCL"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RenderError(f"rendered HCL does not parse: {first_line}") from exc
    return parsed
