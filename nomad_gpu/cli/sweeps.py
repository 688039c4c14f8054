"""`nomad-gpu sweep`: launch a sweep (`sweep SPEC_FILE`, as always), see one (`sweep status ID`), cancel one.

`sweep` was a single command taking a spec file; it became a group so that a sweep's progress has a
home, and a first word that is not a subcommand is still read as the spec of a sweep to launch, so
`nomad-gpu sweep sweep.yaml --no-watch` works as it did.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from nomad_gpu.api.payloads import Sweep
from nomad_gpu.cli import connect
from nomad_gpu.cli.api_client import ApiClient
from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import Column, emit_json, table

HELP = ("Hyper-parameter sweeps as throttled job arrays.\n\n"
        "  nomad-gpu sweep SPEC_FILE [--no-watch] [--json]   launch one (the same as `sweep launch`)\n\n"
        "  nomad-gpu sweep list [--state S]                  the sweeps you may see, newest first\n\n"
        "  nomad-gpu sweep status SWEEP_ID                   progress and the trials' parameters\n\n"
        "  nomad-gpu sweep cancel SWEEP_ID                   drop queued trials, stop running ones")


def _client() -> ApiClient:
    return connect.client()  # one place reads NOMAD_GPU_ADDR / NOMAD_GPU_TOKEN


class SweepGroup(click.Group):
    """A group whose default subcommand is `launch`: `sweep FILE` is `sweep launch FILE`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["launch", *args]
        return super().parse_args(ctx, args)


@click.group(cls=SweepGroup, help=HELP)
def sweep() -> None:
    pass


@sweep.command("launch")
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--watch/--no-watch", default=True, help="Follow progress until every trial has ended.")
@click.option("--json", "as_json", is_flag=True)
@friendly
def launch(spec_file: Path, watch: bool, as_json: bool) -> None:
    """Launch a hyper-parameter sweep as a throttled job array, and follow it."""
    from nomad_gpu.render import SweepSpec, load_spec

    spec = load_spec(spec_file)
    if not isinstance(spec, SweepSpec):
        raise ValueError(f"{spec_file}: not a sweep spec (set kind: sweep)")
    client = _client()
    entries = client.submit(spec_file.read_text(encoding="utf-8"))
    sweep_id = entries[0].sweep or ""
    if as_json:
        emit_json({"sweep": sweep_id, "entries": [e.to_json() for e in entries]})
        return
    click.echo(f"sweep {sweep_id}: {len(entries)} trials queued")
    if watch:
        _follow_sweep(client, sweep_id, len(entries))


def _follow_sweep(client: ApiClient, sweep_id: str, total: int) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[states]}"), TimeElapsedColumn())
    with Progress(*columns) as progress:
        task = progress.add_task(sweep_id, total=total, states="")
        while True:
            info = client.sweep(sweep_id)
            states = info.states
            done = sum(states.get(s, 0) for s in ("complete", "failed", "cancelled"))
            progress.update(task, completed=done, states=" ".join(f"{k}={v}" for k, v in sorted(states.items())))
            if done >= total:
                break
            time.sleep(1.0)


@sweep.command("list")
@click.option("--state", help="Only sweeps with a trial in one of these states (comma-separated).")
@click.option("--json", "as_json", is_flag=True)
@friendly
def list_sweeps(state: str | None, as_json: bool) -> None:
    """The sweeps your token may see (a team's own), newest first, with their trials' counts by state."""
    from nomad_gpu.api.payloads import Sweeps
    from nomad_gpu.cli.entryview import when

    answer = Sweeps.from_json(_client().call("GET", "/v1/sweeps", params={"state": state} if state else {}))
    if as_json:
        emit_json([row.to_json() for row in answer.sweeps])
        return
    rows = [(r.id, r.name, r.team, r.trials, " ".join(f"{k}={v}" for k, v in sorted(r.states.items())),
             when(r.submitted_at)) for r in answer.sweeps]
    table(None, [Column("SWEEP"), Column("NAME", shrink=True), Column("TEAM"), Column("TRIALS", right=True),
                 Column("STATES", shrink=True), Column("SUBMITTED")], rows)


@sweep.command("status")
@click.argument("sweep_id")
@click.option("--json", "as_json", is_flag=True)
@friendly
def status(sweep_id: str, as_json: bool) -> None:
    """A sweep's progress (done / running / queued / failed) and its trials with their parameters."""
    from nomad_gpu.cli.entryview import progress, progress_bar, trial_rows

    info = _client().sweep(sweep_id)
    counts = progress(info.states, info.total)
    if as_json:
        emit_json({**info.to_json(), "progress": counts})
        return
    click.echo(f"sweep {sweep_id}: {info.total} trials")
    click.echo(progress_bar(counts))
    click.echo("")
    headers, rows = trial_rows(info.trials, time.time())
    table(None, headers, rows)


@sweep.command("cancel")
@click.argument("sweep_id")
@click.option("--json", "as_json", is_flag=True)
@friendly
def cancel(sweep_id: str, as_json: bool) -> None:
    """Cancel a sweep: its queued trials are dropped and its running ones stopped."""
    print_cancelled_sweep(_client().cancel_sweep(sweep_id), as_json)


def print_cancelled_sweep(info: Sweep, as_json: bool) -> None:
    if as_json:
        emit_json(info.to_json())
        return
    states = ", ".join(f"{n} {s}" for s, n in sorted(info.states.items()))
    click.echo(f"sweep {info.sweep}: {info.total} trials ({states})")
