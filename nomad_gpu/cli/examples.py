"""`nomad-gpu example [NAME]`: the example job specs, shipped in the wheel, printed to start from.

A user who installed the wheel into an empty directory has no `jobspecs/` to copy; the same files travel
inside the package (:mod:`nomad_gpu.bundled`), and this command prints one (`nomad-gpu example train >
train.yaml`) or, with no name, lists them with the first line of each, which says what it is for.
"""

from __future__ import annotations

import click

from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import Column, table


def _summary(text: str) -> str:
    """The example's opening comment, to its first full stop: what it shows."""
    words: list[str] = []
    for line in text.splitlines():
        body = line.strip().removeprefix("#")
        if not line.startswith("#") or body.startswith("  "):  # the spec itself, or a command line
            break
        words.append(body.strip())
    sentence = " ".join(words)
    end = sentence.find(". ")
    return sentence[:end + 1] if end >= 0 else sentence


@click.command("example")
@click.argument("name", required=False)
@friendly
def example(name: str | None) -> None:
    """Print an example job spec (no NAME: list them). Start a spec with `nomad-gpu example train > train.yaml`."""
    from nomad_gpu import bundled

    if name is None:
        table(None, [Column("EXAMPLE"), Column("WHAT IT SHOWS", shrink=True)],
              [(n, _summary(bundled.example(n))) for n in bundled.examples()])
        return
    click.echo(bundled.example(name), nl=False)
