"""Output helpers: rich tables on a terminal, plain text when piped, JSON with --json."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table


def console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    t = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    console().print(t)


def fail(message: str, code: int = 2) -> None:
    """One line on stderr and an exit code; never a traceback."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
