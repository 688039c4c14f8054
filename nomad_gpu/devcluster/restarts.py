"""What a Nomad client does when a task exits by itself: restart it, end it `complete`, or fail it.

The rule is Nomad's restart tracker (`client/allocrunner/taskrunner/restarts/restarts.go`,
`NewRestartTracker` and `RestartTracker.GetState`, v2.0.5, the same in v1.10.5), applied by
`TaskRunner.shouldRestart` (`client/allocrunner/taskrunner/task_runner.go`, v2.0.5):

- only batch and sysbatch jobs treat exit 0 as done (`onSuccess = false`); every other job type
  restarts a task that exits 0 like one that failed;
- with `attempts = 0` the answer is `TaskNotRestarting` ("Policy allows no restarts"), which marks the
  task failed, unless the job does not restart on success and the exit was 0 (`TaskTerminated`);
- otherwise each exit counts against `attempts` within `interval` (the count restarts with a new
  interval); past it, mode "fail" is `TaskNotRestarting` (failed), mode "delay" waits out the interval;
- a failed task makes the allocation `failed` (`allocrunner/alloc_runner.go` `getClientStatus`), and a
  task that is restarting is `pending` again.

So a service job rendered with `restart { attempts = 0 }` whose task exits 0 ends `failed`. Jitter on
the restart delay is left out (the delay is exact); times are scaled by the cluster's speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

NO_RESTARTS_ALLOWED = "Policy allows no restarts"
"""`restarts.ReasonNoRestartsAllowed` (restarts.go, v2.0.5)."""
RESTART_UNNECESSARY = "Restart unnecessary as task terminated successfully"


class Verdict(Enum):
    TERMINATED = "terminated"  # structs.TaskTerminated: dead, not failed
    NOT_RESTARTING = "not_restarting"  # structs.TaskNotRestarting: dead and failed
    RESTARTING = "restarting"  # structs.TaskRestarting: pending again after `delay_s`


@dataclass(frozen=True)
class RestartPolicy:
    """A task group's `restart` block, in seconds (already defaulted per job type by `canonicalize`)."""

    attempts: int
    interval_s: float
    delay_s: float
    mode: str  # "fail" or "delay"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    delay_s: float = 0.0  # in Nomad's seconds; the caller scales by speed
    count: int = 0  # the tracker's count after this exit
    window_start: float = 0.0  # the tracker's `startTime` after this exit (cluster seconds)


def on_success_restarts(job_type: str) -> bool:
    """`NewRestartTracker`: batch and sysbatch tasks are not restarted after exit 0."""
    return job_type not in ("batch", "sysbatch")


def decide(policy: RestartPolicy, job_type: str, exit_code: int, count: int, window_start: float,
           now: float) -> Decision:
    """`RestartTracker.GetState` for a task that exited with `exit_code` (no start error, not killed).

    `count` and `window_start` are the tracker's state before this exit; `now` and `window_start` are
    in Nomad's time (the caller un-scales the cluster's compressed clock).
    """
    successful = exit_code == 0
    on_success = on_success_restarts(job_type)
    if policy.attempts == 0:
        if not on_success and successful:
            return Decision(Verdict.TERMINATED, NO_RESTARTS_ALLOWED, count=count, window_start=window_start)
        return Decision(Verdict.NOT_RESTARTING, NO_RESTARTS_ALLOWED, count=count, window_start=window_start)
    if now > window_start + policy.interval_s:  # a new interval: the count starts again
        count, window_start = 0, now
    count += 1
    if successful and not on_success:
        return Decision(Verdict.TERMINATED, RESTART_UNNECESSARY, count=count, window_start=window_start)
    if count > policy.attempts:
        if policy.mode == "fail":
            reason = (f'Exceeded allowed attempts {policy.attempts} in interval '
                      f'{go_duration(policy.interval_s)} and mode is "fail"')
            return Decision(Verdict.NOT_RESTARTING, reason, count=count, window_start=window_start)
        return Decision(Verdict.RESTARTING, "Exceeded allowed attempts, applying a delay",
                        max(window_start + policy.interval_s - now, 0.0), count, window_start)
    return Decision(Verdict.RESTARTING, "Restart within policy", policy.delay_s, count, window_start)


def restarting_message(decision: Decision) -> str:
    """The `Restarting` event's DisplayMessage (`TaskEvent.PopulateEventDisplayMessage`, structs.go v2.0.5)."""
    within = f"Task restarting in {go_duration(decision.delay_s)}"
    if decision.reason and decision.reason != "Restart within policy":
        return f"{decision.reason} - {within}"
    return within


def go_duration(seconds: float) -> str:
    """Go's `time.Duration.String` for whole seconds, e.g. 30m0s, 24h0m0s (what the reason prints)."""
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
