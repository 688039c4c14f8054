"""`nomad-gpu store copy SRC DST`: move a queue between stores (SQLite file <-> PostgreSQL), service stopped.

The work is store/transfer.py's; this module is the user's surface: one line for what was copied, and
every refusal (a service still serving SRC or DST, a destination that holds a queue, a DSN that cannot
work) one line and exit code 2 (cli/errors.py).
"""

from __future__ import annotations

import click

from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import emit_json


@click.group("store")
def store() -> None:
    """The queue database itself (the service stopped)."""


@store.command("copy")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option("--json", "as_json", is_flag=True, help="Print what was copied as JSON.")
@friendly
def copy(src: str, dst: str, as_json: bool) -> None:
    """Copy the whole queue from SRC to an empty DST: each a SQLite file (a path or sqlite:///path) or
    postgresql://user@host:5432/dbname.

    Stop the service first (a SQLite file it serves is refused by its lock). The instance prefix is
    copied too: the jobs Nomad runs keep their owner. Serve DST afterwards, never both."""
    from nomad_gpu.store.location import redacted
    from nomad_gpu.store.transfer import copy_between

    copied = copy_between(src, dst)
    if as_json:
        emit_json({"source": redacted(src), "destination": redacted(dst), "entries": copied.entries,
                   "stops": copied.stops})
        return
    click.echo(f"copied {copied.entries} entries and {copied.stops} stop intents from {redacted(src)} to "
               f"{redacted(dst)}")
