"""The service's answers about itself and its accounting: status, teams, history, sweeps, GPU usage and the
caller's identity; read by the CLI and the dashboard. Kept apart from the entries' and the cluster's shapes
(`payloads.py`, which re-exports these) so each module holds one family of wire shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nomad_gpu.api.codec import UNSET, Payload, Unset, doc


@dataclass(frozen=True)
class Status(Payload):
    """The service's health and counts."""

    ready: bool = False
    cycles: int = 0
    queued: int = 0
    live: int = 0
    nodes: int = 0
    gpus: int = 0
    team_usage_gpu: dict[str, float] = field(default_factory=dict)
    holds: dict[str, list[str]] = doc("Entries with nodes held for them (head of line), by node ID.",
                                      default_factory=dict)
    nomad_reachable: bool = True
    draining: int = 0
    instance: str = ""
    event_stream: str = doc("The watcher's state: connecting, following, or forbidden (Nomad refuses the "
                            "token the event stream: see docs/nomad-acl.md).", default="")
    nomad_address: str | Unset = doc("Nomad's address, when the service knows it.", default=UNSET)
    mig_relayouts: dict[str, Any] | None = doc(
        "MIG re-layouts: `in_flight` and recent `failed` ones (node, gpu, layout, phase, reason) and "
        "`counts` (started, done, failed); null where re-layouts are off (docs/mig-relayout.md).", default=None)
    preemptions: list[dict[str, Any]] = doc(
        "Preemptions under way (docs/classes.md): `preemptor`, `node`, `node_name`, `victims`, `stopping` (those "
        "not yet stopped), `why` (class or priority).", default_factory=list)
    grace_warnings: dict[str, str] = doc(
        "Entries whose checkpoint grace is longer than the nodes' max_kill_timeout (`nomad.max_kill_timeout`), "
        "with the warning: Nomad kills them sooner.", default_factory=dict)
    cycle_failures: int = doc("Scheduling cycles that failed since the service started (see the service log).",
                              default=0)
    last_cycle_error: str | None = doc("The last failed cycle's error (admin callers only); null: none.",
                                       default=None)
    role: str = doc("`leader`: this replica acts on Nomad (always, on SQLite); `standby`: it forwards requests "
                    "to the leader (PostgreSQL, several replicas: docs/reliability.md).", default="leader")
    epoch: int | None = doc("The leader's lease epoch (grows at every takeover); null on SQLite.", default=None)
    leader: str = doc("The leader's API address; empty on SQLite, and while no replica leads.", default="")
    team_borrowed_gpu: dict[str, float] = doc("Per team of a cohort past its quota: GPU-equivalents in use on "
                                              "capacity its cohort lends (docs/cohorts.md).", default_factory=dict)


@dataclass(frozen=True)
class TeamRow(Payload):
    """A team's GPU-equivalents in use, quota, weight and fair share, and its entries waiting or live."""

    team: str = ""
    in_use_gpu: float = 0.0
    quota_gpu: float | None = None
    weight: float | None = None
    fair_share_gpu: float = 0.0
    queued: int = 0
    live: int = 0
    borrowed_gpu: float = 0.0
    """In use past its quota, on capacity its cohort lends."""
    lent_gpu: float = 0.0
    """Of its unused quota, what the cohort's borrowers hold now."""
    cohort: str | None = None


@dataclass(frozen=True)
class Teams(Payload):
    capacity_gpu: float = 0.0
    teams: tuple[TeamRow, ...] = ()


@dataclass(frozen=True)
class Minute(Payload):
    t: int = doc("The minute's first second (Unix seconds).", default=0)
    gpus_in_use: float = 0.0
    queued: int = 0
    admitted: int = 0


@dataclass(frozen=True)
class History(Payload):
    """GPUs in use, queue depth and admissions per minute."""

    step_s: int = 60
    window_s: int = 86400
    now: float = 0.0
    minutes: tuple[Minute, ...] = ()


@dataclass(frozen=True)
class SweepRow(Payload):
    """One sweep in a list: whose, how many trials, how far along."""

    id: str = ""
    name: str = ""
    team: str = ""
    trials: int = 0
    states: dict[str, int] = doc("Trials per state.", default_factory=dict)
    submitted_at: float = 0.0


@dataclass(frozen=True)
class Sweeps(Payload):
    sweeps: tuple[SweepRow, ...] = ()


@dataclass(frozen=True)
class UsageRow(Payload):
    """What one group (a team, class, kind or model) used over the report's window."""

    key: str = ""
    gpu_hours: float = doc("GPU-equivalents held x hours, summed over every attempt's time in the window.",
                           default=0.0)
    jobs: int = doc("Entries with any part of their life in the window.", default=0)
    attempts: int = 0
    mean_wait_s: float | None = doc("Mean time from submission to first admission (null: none admitted).",
                                    default=None)
    p95_wait_s: float | None = None
    failures: int = doc("Entries that ended failed (or dependency-failed) in the window.", default=0)
    idle_gpu_hours: float = doc("GPU-equivalents held while every device of the job was idle x hours, in the "
                                "window (measured by the usage poller's rounds).", default=0.0)
    reclaimed_gpu_hours: float = doc("GPU-hours returned by idle reclaim in the window: each reclaimed job's "
                                     "GPU-equivalents x the time from its reclaim to the window's end (or its "
                                     "max_runtime, if sooner), which it would otherwise have held.", default=0.0)
    reclaims: int = doc("Jobs taken back for being idle in the window.", default=0)
    preemptions: int = doc("Attempts of these entries that were preempted (queued again for a waiting job).",
                           default=0)
    lost_gpu_hours: float = doc("GPU-equivalents x hours of the preempted attempts within the window: work lost "
                                "since each one's start (an upper bound where the job checkpoints).", default=0.0)
    borrowed_gpu_hours: float | Unset = doc(
        "By team, for a team of a cohort: GPU-hours held past its quota (on capacity its cohort lent), from "
        "what it held at each moment against its quota now (docs/cohorts.md); absent otherwise.", default=UNSET)


@dataclass(frozen=True)
class UsageReport(Payload):
    """GPU accounting over a window (`nomad-gpu report`), by one key; not an entry's live `usage`."""

    since: float = 0.0
    until: float = 0.0
    by: str = "team"
    rows: tuple[UsageRow, ...] = ()


@dataclass(frozen=True)
class Whoami(Payload):
    """Who the caller's token makes it, so a page can say whose view it shows."""

    team: str | None = doc("The token's team; null: an admin token (or no token needed).", default=None)
    admin: bool = False
    user: str | None = doc("The person the token belongs to (`api.tokens` `user:`); null: none said.", default=None)
