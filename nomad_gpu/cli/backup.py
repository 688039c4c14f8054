"""`nomad-gpu backup FILE`: copy the queue database while the service runs (restore: README).

A command of its own module so that main.py stays the user's surface; the work is done by
:mod:`nomad_gpu.service.backup` (SQLite's online backup of one read snapshot).
"""

from __future__ import annotations

from pathlib import Path

import click

from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import emit_json


@click.command()
@click.argument("dest", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", "db_path", default="nomad-gpu.db", show_default=True,
              help="The queue database to copy (the service's `serve --db`: a path or sqlite:///path).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@friendly
def backup(dest: Path, db_path: str, force: bool, as_json: bool) -> None:
    """A consistent copy of the queue database, safe while the service is serving."""
    from nomad_gpu.service.backup import backup_database

    result = backup_database(db_path, dest, overwrite=force)
    if as_json:
        emit_json(result.to_json())
        return
    click.echo(f"backed up {result.source} to {result.path}: {result.bytes} bytes, schema v{result.schema_version}, "
               f"{result.seconds:.2f} s")
