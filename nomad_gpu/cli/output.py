"""Output helpers: rich tables on a terminal, plain tab-separated text when piped, JSON with --json.

On a terminal a table fits its width: short columns (IDs, numbers, states) never wrap, and only the
columns marked `shrink` give way (folded onto more lines). Without a terminal (a pipe, a file, a test)
the same table is a header line and one line per row, fields separated by a tab and never cut, so
`cut -f` and `awk -F'\\t'` read it; a title, if any, is a first line starting with `# `.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Column:
    header: str
    shrink: bool = False
    """This column folds onto more lines when the terminal is too narrow; the others never wrap."""
    right: bool = False


def console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _plain(value: Any) -> str:
    return " ".join(_cell(value).split())  # a tab or newline inside a value must not split a field


def table(title: str | None, columns: Sequence[str | Column], rows: Sequence[Sequence[Any]], *,
          out: Console | None = None) -> None:
    """Print rows under columns: fitted to a terminal, or tab-separated where there is none."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    target = out or Console(highlight=False)
    if not target.is_terminal:
        lines = [f"# {title}"] if title else []
        lines.append("\t".join(c.header for c in cols))
        lines.extend("\t".join(_plain(v) for v in r) for r in rows)
        target.file.write("\n".join(lines) + "\n")
        target.file.flush()
        return
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, pad_edge=False,
              header_style="bold")
    cells = [[_cell(v) for v in r] for r in rows]
    for i, c in enumerate(cols):
        widest = max((len(r[i]) for r in cells if i < len(r)), default=0)
        if c.shrink:
            t.add_column(c.header, overflow="fold", justify="right" if c.right else "left", min_width=8)
        else:  # never wrapped, never cut: an ID or a number split over two lines reads wrong
            t.add_column(c.header, no_wrap=True, overflow="ellipsis", justify="right" if c.right else "left",
                         min_width=max(widest, len(c.header)))
    for r in cells:
        t.add_row(*(Text(c) for c in r))  # plain text: a `[...]` in a name or a MIG picture is not markup
    target.print(t, soft_wrap=False)


NOTE_INDENT = "    "
"""A row's note line starts under the row, indented so that the rows stay easy to scan."""
_GAP = " "
_MIN_SHRUNK = 6


def noted_table(columns: Sequence[Column], rows: Sequence[Sequence[Any]], notes: Sequence[str], *,
                out: Console) -> None:
    """Rows fitted to a terminal's width, each followed by its note (a reason, a place) wrapped on lines
    of its own: a long text never squeezes a column into one word per line. Columns marked `shrink` give
    way first (cut with `…`); the others are never cut. Plain text, as `table` writes it."""
    width = max(out.width, 20)
    cells = [[_plain(v) for v in r] for r in rows]
    sizes = [max([len(c.header), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    total = sum(sizes) + len(_GAP) * (len(sizes) - 1)
    while total > width:  # the widest shrinkable column gives one character at a time
        i = max((i for i, c in enumerate(columns) if c.shrink and sizes[i] > _MIN_SHRUNK),
                key=lambda i: sizes[i], default=None)
        if i is None:
            break
        sizes[i] -= 1
        total -= 1

    def line(values: Sequence[str]) -> str:
        parts = []
        for value, size, col in zip(values, sizes, columns, strict=True):
            text = value if len(value) <= size else value[:size - 1] + "…"
            parts.append(text.rjust(size) if col.right else text.ljust(size))
        return _GAP.join(parts).rstrip()

    lines = [line([c.header for c in columns])]
    for row, note in zip(cells, notes, strict=True):
        lines.append(line(row))
        if note := _plain(note):
            lines.extend(textwrap.wrap(note, width=width, initial_indent=NOTE_INDENT, subsequent_indent=NOTE_INDENT,
                                       break_long_words=True, break_on_hyphens=False))
    out.file.write("\n".join(lines) + "\n")
    out.file.flush()


def fail(message: str, code: int = 2) -> None:
    """One line on stderr and an exit code; never a traceback."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
