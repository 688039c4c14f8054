"""The everyday commands of a batch queue once a job is in: hold, release, requeue, update, keep, logs.

Each is one call to the service (`logs -f` a series of them), so a team's token acts only on its
team's entries there, and a state that does not allow the change comes back as one line, exit 2.
`logs -f` follows by asking again from the offset it reached, once a second, and stops when the
allocation has ended and nothing more came: no connection is held open, and every call has a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from nomad_gpu.api.payloads import Entry, Kept, Patch
from nomad_gpu.cli import connect
from nomad_gpu.cli.api_client import ApiClient, ServiceError
from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import emit_json

FOLLOW_EVERY_S = 1.0


def _client() -> ApiClient:
    return connect.client()  # one place reads NOMAD_GPU_ADDR / NOMAD_GPU_TOKEN


def _done(entry: Entry, as_json: bool, note: str = "") -> None:
    if as_json:
        emit_json(entry.to_json())
        return
    extra = f"  priority {entry.priority}" if note == "priority" else ""
    held = "  (held)" if entry.held else ""
    click.echo(f"{entry.id}  {entry.state}{held}{extra}")


@click.command()
@click.argument("entry_id")
@click.option("--json", "as_json", is_flag=True)
@friendly
def hold(entry_id: str, as_json: bool) -> None:
    """Keep a queued entry's place in the queue but admit nothing for it until `release`."""
    _done(_client().act(entry_id, "hold"), as_json)


@click.command()
@click.argument("entry_id")
@click.option("--json", "as_json", is_flag=True)
@friendly
def release(entry_id: str, as_json: bool) -> None:
    """Let a held entry be admitted again, from the place it kept."""
    _done(_client().act(entry_id, "release"), as_json)


@click.command()
@click.argument("entry_id")
@click.option("--json", "as_json", is_flag=True)
@friendly
def requeue(entry_id: str, as_json: bool) -> None:
    """Stop a running entry's job and queue it again (no retry is used)."""
    _done(_client().act(entry_id, "requeue"), as_json)


@click.command()
@click.argument("entry_id")
@click.option("--priority", type=click.IntRange(1, 100), required=True, help="The new priority, 1 to 100.")
@click.option("--json", "as_json", is_flag=True)
@friendly
def update(entry_id: str, priority: int, as_json: bool) -> None:
    """Change a waiting or running entry's priority."""
    _done(_client().update(entry_id, Patch(priority=priority)), as_json, "priority")


@click.command()
@click.argument("entry_id")
@click.option("--for", "for_", default=None, metavar="DURATION",
              help="How long from now: 2h, 90m (default 1h, at most the class's idle max_keep).")
@click.option("--json", "as_json", is_flag=True)
@friendly
def keep(entry_id: str, for_: str | None, as_json: bool) -> None:
    """Postpone a running job's idle reclaim: it is not stopped for being idle until then."""
    body = {"for": for_} if for_ is not None else {}
    kept = Kept.from_json(_client().call("POST", f"/v1/jobs/{entry_id}/keep", json=body))
    if as_json:
        emit_json(kept.to_json())
        return
    click.echo(f"{kept.id}  kept until {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(kept.kept_until))}")


@click.command()
@click.argument("entry_id")
@click.option("--stderr", "stderr", is_flag=True, help="The task's stderr instead of its stdout.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing what the task writes until it ends.")
@click.option("--group", default=None, help="The task group (default: the first).")
@click.option("--index", type=click.IntRange(min=0), default=None, help="The group member, for count > 1.")
@click.option("--task", default=None, help="The task, when the group runs more than one.")
@friendly
def logs(entry_id: str, stderr: bool, follow: bool, group: str | None, index: int | None, task: str | None) -> None:
    """A job's output, read from Nomad's client (no allocation ID needed)."""
    follow_logs(_client(), entry_id, "stderr" if stderr else "stdout", follow, write=_write,
                where={"group": group, "index": index, "task": task})


def _write(data: bytes) -> None:
    click.echo(data, nl=False)


def follow_logs(client: ApiClient, entry_id: str, log_type: str, follow: bool, *, write: Callable[[bytes], None],
                where: dict[str, Any], sleep: Callable[[float], None] = time.sleep) -> int:
    """Print the log; with ``follow``, keep reading from the offset reached until the allocation ended and
    a last read came back empty (and, before the first byte, wait while the entry is admitted but its
    task has not started). Returns the bytes written."""
    offset = 0
    while True:
        try:
            data, offset_after, ended = client.logs(entry_id, log_type, offset, **where)
        except ServiceError as exc:
            # admitted but not started (no allocation yet, or its task not started): wait for it when following
            if not (follow and exc.status == 404 and offset == 0 and _starting(client, entry_id)):
                raise
            sleep(FOLLOW_EVERY_S)
            continue
        if data:
            write(data)
        offset = offset_after
        if not follow or (ended and not data):
            return offset
        sleep(FOLLOW_EVERY_S)


def _starting(client: ApiClient, entry_id: str) -> bool:
    return client.job(entry_id).state in ("admitted", "running")
