"""The transition table of a job's life, written from `machine.apply` itself: every named state of an
attempt met with every kind of event, each row what `apply` returns. docs/CONTRIBUTING.md shows it, and a
test keeps the two equal; `python -m nomad_gpu.service.life.table` prints it.
"""

from __future__ import annotations

from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.machine import apply
from nomad_gpu.service.life.record import Phase, Record
from nomad_gpu.store import EntryState

_Q = Record("q1", retries_left=1)
_A = Record("q1", phase=Phase.ADMITTED, booked=True, retries_left=1)
STATES: dict[str, Record] = {
    "queued": _Q,
    "queued, held": Record("q1", held=True),
    "admitted, registering": Record("q1", phase=Phase.ADMITTED, booked=True, registering=True, retries_left=1),
    "admitted, register to retry": _A,
    "admitted, registered": Record("q1", phase=Phase.ADMITTED, booked=True, registered=True, retries_left=1),
    "running": Record("q1", phase=Phase.RUNNING, booked=True, registered=True, open=frozenset({"a1"}),
                      retries_left=1),
    "running, no retry left": Record("q1", phase=Phase.RUNNING, booked=True, registered=True,
                                     open=frozenset({"a1"})),
    "draining, register in flight": Record("q1", phase=Phase.DRAINING, outcome=EntryState.CANCELLED, booked=True,
                                           registering=True),
    "draining": Record("q1", phase=Phase.DRAINING, outcome=EntryState.CANCELLED, booked=True, open=frozenset({"a1"})),
    "draining, stopped": Record("q1", phase=Phase.DRAINING, outcome=EntryState.CANCELLED, booked=True, stopped=True,
                                open=frozenset({"a1"})),
    "preempting": Record("q1", phase=Phase.PREEMPTING, booked=True, registered=True, open=frozenset({"a1"})),
    "preempting, stopped": Record("q1", phase=Phase.PREEMPTING, booked=True, registered=True, stopped=True,
                                  open=frozenset({"a1"})),
    "ended": Record("q1", phase=Phase.ENDED, outcome=EntryState.CANCELLED),
}
"""The states an attempt can be in, by name (the scheduler's own ones, in flight and draining, included)."""

EVENTS: dict[str, ev.Event] = {
    "submit": ev.Submit(),
    "admit": ev.Admit(),
    "register ok": ev.RegisterOk(0),
    "register lost": ev.RegisterLost(0, "unreachable"),
    "register refused": ev.RegisterRefused(0, "invalid"),
    "register deferred": ev.RegisterDeferred(0),
    "alloc running": ev.AllocUpdate("a1"),
    "alloc complete": ev.AllocUpdate("a1", terminal=True, succeeded=True, complete=True, outcome="complete"),
    "alloc failed": ev.AllocUpdate("a1", terminal=True, outcome="failed"),
    "alloc killed, exit 0": ev.AllocUpdate("a1", terminal=True, complete=True, outcome="killed", exited_zero=True),
    "alloc max_run_duration": ev.AllocUpdate("a1", terminal=True, outcome="timed out", timeout="timeout"),
    "alloc short of its pins": ev.AllocUpdate("a1", pin_short="short"),
    "alloc lost (node cut off)": ev.AllocUpdate("a1", terminal=True, outcome="lost", cut_off="cut off"),
    "alloc unknown (node cut off)": ev.AllocUpdate("a1", cut_off="cut off"),
    "cut-off alloc's bound passed": ev.CutOffExpired("a1"),
    "alloc ended, its node cut off": ev.AllocUpdate("a1", terminal=True, complete=True, outcome="killed",
                                                    ended_cut_off="cut off, ended"),
    "alloc ended cut off, replaced by Nomad": ev.AllocUpdate("a1", terminal=True, complete=True, outcome="replaced",
                                                            replaced_by="a2"),
    "allocs gone": ev.AllocsGone(),
    "evaluation refused": ev.EvalRefused("no driver"),
    "cancel": ev.Cancel(),
    "dependency failed": ev.DependencyFailed("dep failed"),
    "spec invalid": ev.SpecInvalid("invalid"),
    "hold": ev.Hold(True),
    "release": ev.Hold(False),
    "requeue": ev.Requeue(),
    "timer: register retry": ev.TimerFired(ev.Timer.RETRY),
    "timer: admission deadline": ev.TimerFired(ev.Timer.DEADLINE, "deadline"),
    "timer: max_runtime": ev.TimerFired(ev.Timer.RUNTIME, "timeout"),
    "resume": ev.Resume(),
    "stop confirmed": ev.StopConfirmed((("a1", True),)),
    "job gone": ev.JobGone(),
    "job dead": ev.JobDead(),
    "job deregistered": ev.JobDeregistered(),
    "preempt": ev.Preempt(),
    "reclaim: requeue": ev.Reclaim(),
    "reclaim: stop": ev.Reclaim(requeue=False),
    "lease lost (coming)": ev.LeaseLost(),
}
"""One of each kind of event (allocation updates in each of their outcomes)."""


def describe(r: Record) -> str:
    """A record's state in the table's words."""
    if r.fenced:
        return "fenced"
    if r.phase is Phase.ENDED:
        return f"ended ({r.outcome.value})" if r.outcome is not None else "ended"
    if r.phase is Phase.DRAINING:
        then = f" ({r.outcome.value})" if r.outcome is not None else ""
        if r.registering:
            return f"draining, register in flight{then}"
        if r.stopped and not r.open:
            return f"drained{then}"
        return f"draining, stopped{then}" if r.stopped else f"draining{then}"
    if r.phase is Phase.PREEMPTING:
        return "preempting, stopped" if r.stopped else "preempting"
    word = str(r.phase.value) + (", held" if r.held else "")
    if r.phase is Phase.ADMITTED:
        word += ", registering" if r.registering else ", registered" if r.registered else ", register to retry"
    return word


def effect_words(effects: tuple[ev.Effect, ...]) -> str:
    out = []
    for fx in effects:
        name = type(fx).__name__
        if isinstance(fx, ev.Move):
            extra = " +stop" if fx.stop else ""
            out.append(f"Move({fx.to.value}{extra})")
        elif isinstance(fx, ev.Count):
            out.append(f"Count({fx.label})")
        else:
            out.append(name)
    return ", ".join(out)


def rows() -> list[tuple[str, str, str, str]]:
    """(state, event, next state, effects) for every pair that changes something."""
    out = []
    for state, record in STATES.items():
        for event_name, event in EVENTS.items():
            after, effects = apply(record, event)
            if after == record and not effects:
                continue
            out.append((state, event_name, describe(after), effect_words(effects)))
    return out


def render() -> str:
    """The table as Markdown."""
    lines = ["| state | event | next state | effects, in order |", "|---|---|---|---|"]
    lines += [f"| {s} | {e} | {n} | {f or '-'} |" for s, e, n, f in rows()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
