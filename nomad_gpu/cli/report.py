"""`nomad-gpu report`: GPU accounting over a window, Slurm's `sreport` for the queue.

GPU-hours (GPU-equivalents held x time, per attempt), jobs, attempts, mean and p95 wait and failures, idle
reclaim's figures (GPU-hours held idle, jobs reclaimed, GPU-hours returned by reclaim), and the attempts
preempted with the GPU-hours they lost,
grouped by team, workload class, capacity kind, GPU model, submitting user or sweep; `--csv` for a
spreadsheet. The numbers are the service's (`GET /v1/usage`, :mod:`nomad_gpu.service.accounting.report`); a
team's token reports its team.
Not an entry's live `usage` (its GPUs' utilisation now).
"""

from __future__ import annotations

import csv
import sys

import click

from nomad_gpu.api.payloads import Unset, UsageReport, UsageRow
from nomad_gpu.cli.errors import friendly
from nomad_gpu.cli.output import Column, emit_json, table
from nomad_gpu.cli.queueview import duration

COLUMNS = tuple(Column(h, right=True) for h in ("GPU-HOURS", "JOBS", "ATTEMPTS", "MEAN WAIT", "P95 WAIT", "FAILED",
                                                "IDLE GPU-H", "RECLAIMED", "RETURNED GPU-H", "PREEMPTED",
                                                "LOST GPU-H"))


def _wait(seconds: float | None) -> str:
    return "-" if seconds is None else duration(seconds)


@click.command()
@click.option("--since", default="30d", show_default=True, help="How far back: 30d, 12h, 90m, or seconds.")
@click.option("--by", type=click.Choice(["team", "class", "kind", "model", "user", "sweep"]), default="team",
              show_default=True, help="user: the token's `user:` that submitted it (api.tokens); sweep: its sweep.")
@click.option("--csv", "as_csv", is_flag=True, help="Comma-separated values (waits in seconds).")
@click.option("--json", "as_json", is_flag=True)
@friendly
def report(since: str, by: str, as_csv: bool, as_json: bool) -> None:
    """GPU-hours, jobs, waits and failures over a window, by team, class, kind, model, user or sweep."""
    from nomad_gpu.cli import connect

    answer = UsageReport.from_json(connect.client().call("GET", "/v1/usage", params={"since": since, "by": by}))
    if as_json:
        emit_json(answer.to_json())
        return
    if as_csv:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow([by, "gpu_hours", "jobs", "attempts", "mean_wait_s", "p95_wait_s", "failures", "idle_gpu_hours",
                      "reclaims", "reclaimed_gpu_hours", "preemptions", "lost_gpu_hours"])
        out.writerows([r.key, r.gpu_hours, r.jobs, r.attempts, _blank(r.mean_wait_s), _blank(r.p95_wait_s),
                       r.failures, r.idle_gpu_hours, r.reclaims, r.reclaimed_gpu_hours, r.preemptions,
                       r.lost_gpu_hours] for r in answer.rows)
        return
    lent = any(not isinstance(r.borrowed_gpu_hours, Unset) for r in answer.rows)
    table(f"GPU usage by {by}, last {since}", [Column(by.upper(), shrink=True), *COLUMNS,
                                               *([Column("BORROWED", right=True)] if lent else [])],
          [_row(r, lent) for r in answer.rows])


def _row(r: UsageRow, lent: bool = False) -> tuple[object, ...]:
    row = (r.key, f"{r.gpu_hours:.2f}", r.jobs, r.attempts, _wait(r.mean_wait_s), _wait(r.p95_wait_s), r.failures,
           f"{r.idle_gpu_hours:.2f}", r.reclaims, f"{r.reclaimed_gpu_hours:.2f}", r.preemptions,
           f"{r.lost_gpu_hours:.2f}")
    if not lent:
        return row
    return (*row, "-" if isinstance(r.borrowed_gpu_hours, Unset) else f"{r.borrowed_gpu_hours:.2f}")


def _blank(value: float | None) -> object:
    return "" if value is None else value
