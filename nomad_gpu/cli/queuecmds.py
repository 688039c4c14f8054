"""`nomad-gpu queue` and `nomad-gpu cancel`: what is waiting and running, and ending several at once.

Slurm's `squeue` shows what is pending and running, not history, and `scancel` takes several job IDs or
filters; users bring both habits. `queue` therefore lists queued, admitted and running entries unless
asked for `--all` (or given `--state`), and both commands take the same filters: `--team`, `--name` (a
glob like `resnet*`), `--state`, `--sweep`. The service filters by all four, over what the caller's
token may see, so a filter never widens what a token reaches; team and name are matched here again, so
that a service from before those filters (which ignores them) gives the same answer (`[^a]` negates
here as it does in the service's SQLite GLOB, like `[!a]`). A
cancel of more than one entry asks first on a terminal (`--yes` skips it); an entry the token may not
touch is refused by the service as not found, reported on its own line, and the exit code says so.
"""

from __future__ import annotations

import fnmatch
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from nomad_gpu.api.payloads import Entry
from nomad_gpu.cli import connect
from nomad_gpu.cli.api_client import ApiClient, ServiceError
from nomad_gpu.cli.errors import BAD_INPUT, friendly
from nomad_gpu.cli.output import console, emit_json, noted_table, table

LIVE_STATES = ("queued", "admitted", "running", "preempting")
"""What `queue` shows without `--all`: waiting and running (preempting: stopping for a waiting job), as
`squeue` does."""

F = TypeVar("F", bound=Callable[..., Any])


def _client() -> ApiClient:
    return connect.client()  # one place reads NOMAD_GPU_ADDR / NOMAD_GPU_TOKEN


def interactive() -> bool:
    """Whether a person is at the keyboard (stdin is a terminal): only then is a question asked."""
    return sys.stdin.isatty()


def filters(fn: F) -> F:
    """The filters `queue` and `cancel` share."""
    for option in reversed((
        click.option("--team", help="Only entries of this team."),
        click.option("--name", "name_glob", help="Only entries whose name matches (a glob: 'resnet*')."),
        click.option("--state", help="Comma-separated states: queued,admitted,running,complete,failed,cancelled,"
                                     "dependency-failed,reclaimed (default: queued,admitted,running)."),
        click.option("--sweep", "sweep_id", help="Only the trials of this sweep."),
    )):
        fn = option(fn)
    return fn


def select(client: ApiClient, *, state: str | None, sweep_id: str | None, team: str | None,
           name_glob: str | None, everything: bool = False, eta: bool = False) -> list[Entry]:
    """The entries the filters pick, of those the caller may see."""
    states = None if everything and not state else (state or ",".join(LIVE_STATES))
    entries = client.jobs(states, sweep_id, eta=eta, team=team, name_glob=name_glob)
    return [e for e in entries if (team is None or e.team == team)
            and (name_glob is None or fnmatch.fnmatchcase(e.name, name_glob.replace("[^", "[!")))]


@click.command()
@filters
@click.option("--all", "everything", is_flag=True, help="History too: every state (complete, failed, cancelled).")
@click.option("--wide", is_flag=True, help="More columns: namespace, sweep, attempts, Nomad job, exact device IDs.")
@click.option("--sort", "sort_by", type=click.Choice(["position", "submitted", "priority", "name"]),
              help="Row order (default: position, the order the scheduler decides in: running first, then by "
                   "POS, then what it does not consider: held, waiting for after:, beyond max_parallel). --json "
                   "keeps the service's order unless --sort is given.")
@click.option("--json", "as_json", is_flag=True)
@friendly
def queue(team: str | None, name_glob: str | None, state: str | None, sweep_id: str | None, everything: bool,
          wide: bool, sort_by: str | None, as_json: bool) -> None:
    """Waiting and running entries (--all for history): their place in the scheduler's order (POS), what each
    asks for, how long it waited, and why it waits or where it runs."""
    from nomad_gpu.cli.queueview import (
        QUEUE_COLUMNS,
        QUEUE_WIDE_COLUMNS,
        TERMINAL_COLUMNS,
        TERMINAL_WIDE_COLUMNS,
        queue_row,
        sort_key,
        terminal_row,
    )

    client = _client()
    entries = select(client, state=state, sweep_id=sweep_id, team=team, name_glob=name_glob, everything=everything,
                     eta=True)
    if sort_by is not None or not as_json:
        entries = sorted(entries, key=sort_key(sort_by or "position"))
    if as_json:
        emit_json([e.to_json() for e in entries])
        return
    names = connect.node_names(client) if any(e.placements for e in entries) else {}
    now = time.time()
    out = console()
    if out.is_terminal:  # the reason on its own lines under the row: 80 columns read
        rows = [terminal_row(e, names, now, wide) for e in entries]
        noted_table(TERMINAL_WIDE_COLUMNS if wide else TERMINAL_COLUMNS, [r for r, _ in rows], [n for _, n in rows],
                    out=out)
        return
    table(None, QUEUE_WIDE_COLUMNS if wide else QUEUE_COLUMNS, [queue_row(e, names, now, wide) for e in entries],
          out=out)


@click.command()
@click.argument("entry_ids", nargs=-1)
@filters
@click.option("--yes", "-y", is_flag=True, help="Do not ask before cancelling more than one entry.")
@click.option("--json", "as_json", is_flag=True)
@friendly
def cancel(entry_ids: tuple[str, ...], team: str | None, name_glob: str | None, state: str | None,
           sweep_id: str | None, yes: bool, as_json: bool) -> None:
    """Cancel entries (their Nomad jobs are stopped): by ID (several at once, or a sweep's ID for all its
    trials), or every live entry the filters pick. More than one asks first on a terminal."""
    client = _client()
    if not entry_ids and not any((team, name_glob, state, sweep_id)):
        raise click.UsageError("name entries to cancel (IDs) or filters (--team, --name, --state, --sweep)")
    if entry_ids and any((team, name_glob, state, sweep_id)):
        raise click.UsageError("give entry IDs or filters, not both")
    targets = list(entry_ids) or [e.id for e in select(client, state=state, sweep_id=sweep_id, team=team,
                                                       name_glob=name_glob)]
    if not targets:
        click.echo("nothing to cancel: no live entry matches", err=True)
        return
    if len(targets) > 1 and not yes and interactive() and not click.confirm(
            f"cancel {len(targets)} entries ({', '.join(targets[:5])}{', ...' if len(targets) > 5 else ''})?"):
        raise click.Abort()
    done, refused = _cancel_each(client, targets, single=len(entry_ids) == 1)
    if as_json:
        emit_json(done[0] if len(entry_ids) == 1 and done and not refused else
                  {"cancelled": done, "refused": [{"id": i, "error": m} for i, m in refused]})
    else:
        for item in done:
            click.echo(f"{item['id']}  {item['state']}" if "id" in item else _sweep_line(item))
        for entry_id, message in refused:
            click.echo(f"{entry_id}  refused: {message}", err=True)
    if refused:
        sys.exit(BAD_INPUT)


def _cancel_each(client: ApiClient, targets: Sequence[str], *, single: bool) -> tuple[list[dict[str, Any]],
                                                                                       list[tuple[str, str]]]:
    """Cancel one by one: an ID that is no entry may be a sweep's (its trials are cancelled)."""
    done: list[dict[str, Any]] = []
    refused: list[tuple[str, str]] = []
    for target in targets:
        try:
            done.append(client.cancel(target).to_json())
            continue
        except ServiceError as exc:
            if exc.status != 404:
                if single:
                    raise
                refused.append((target, str(exc)))
                continue
        try:
            done.append(client.cancel_sweep(target).to_json())
        except ServiceError as again:
            if again.status != 404 and single:
                raise
            message = f"no queue entry or sweep {target!r}" if again.status == 404 else str(again)
            if single:
                raise ServiceError(message, again.status) from None
            refused.append((target, message))
    return done, refused


def _sweep_line(info: dict[str, Any]) -> str:
    states = ", ".join(f"{n} {s}" for s, n in sorted((info.get("states") or {}).items()))
    return f"sweep {info.get('sweep')}: {info.get('total')} trials ({states})"
