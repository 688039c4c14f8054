"""The life of a job as a table: state x event -> state, effects (service/life/machine.py), pure.

Each row is one guarantee of docs/reliability.md "One home for a job's life" read as a transition; the
generated table in docs/CONTRIBUTING.md is checked against the code here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.machine import apply
from nomad_gpu.service.life.record import Phase, Record
from nomad_gpu.service.life.table import EVENTS, STATES, render, rows
from nomad_gpu.store import EntryState
from nomad_gpu.store.entries import TRANSITIONS

DOCS = Path(__file__).resolve().parents[3] / "docs" / "CONTRIBUTING.md"

QUEUED = Record("q1", retries_left=1)
REGISTERING = Record("q1", phase=Phase.ADMITTED, booked=True, registering=True, retries_left=1)
RETRY = Record("q1", phase=Phase.ADMITTED, booked=True, retries_left=1, failures=1)
REGISTERED = Record("q1", phase=Phase.ADMITTED, booked=True, registered=True, retries_left=1)
RUNNING = Record("q1", phase=Phase.RUNNING, booked=True, registered=True, open=frozenset({"a1"}), retries_left=1)
# a register retried after a lost reply, still in flight when the first one's allocation was seen running
RETRY_RUNNING = Record("q1", phase=Phase.RUNNING, booked=True, registering=True, failures=1,
                       open=frozenset({"a1"}), retries_left=1)
LAST_TRY = Record("q1", phase=Phase.RUNNING, booked=True, registered=True, open=frozenset({"a1"}))
TWO = Record("q1", phase=Phase.RUNNING, booked=True, registered=True, open=frozenset({"a1", "a2"}), groups=2)
DRAIN_IN_FLIGHT = Record("q1", phase=Phase.DRAINING, outcome=EntryState.CANCELLED, booked=True, registering=True)
DRAINING = Record("q1", phase=Phase.DRAINING, outcome=EntryState.CANCELLED, booked=True, open=frozenset({"a1"}))
STOPPED = Record("q1", phase=Phase.DRAINING, outcome=EntryState.CANCELLED, booked=True, stopped=True,
                 open=frozenset({"a1"}))
ENDED = Record("q1", phase=Phase.ENDED, outcome=EntryState.COMPLETE)
PREEMPTING = Record("q1", phase=Phase.PREEMPTING, booked=True, registered=True, open=frozenset({"a1"}),
                    retries_left=1)
PREEMPTING_STOPPED = Record("q1", phase=Phase.PREEMPTING, booked=True, registered=True, open=frozenset({"a1"}),
                            stopped=True)
KILLED = ev.AllocUpdate("a1", terminal=True, complete=True, outcome="killed (desired stop)")
SAVED = ev.AllocUpdate("a1", terminal=True, complete=True, outcome="killed (desired stop)", exited_zero=True)

LIVE = (EntryState.ADMITTED, EntryState.RUNNING)
Q = (EntryState.QUEUED,)
OK_ALLOC = ev.AllocUpdate("a1", terminal=True, succeeded=True, complete=True, outcome="complete")
FAILED_ALLOC = ev.AllocUpdate("a1", terminal=True, outcome="failed")


def names(effects: tuple[ev.Effect, ...]) -> list[str]:
    return [type(fx).__name__ for fx in effects]


@pytest.mark.parametrize(("record", "event", "phase", "outcome", "effects"), [
    pytest.param(QUEUED, ev.Admit(2), Phase.ADMITTED, None, ["Move", "Register"], id="admit-registers"),
    pytest.param(Record("q1", held=True), ev.Admit(), Phase.QUEUED, None, [], id="held-not-admitted"),
    pytest.param(QUEUED, ev.Cancel(), Phase.ENDED, EntryState.CANCELLED, ["Unhold", "Move", "Forget"],
                 id="cancel-queued"),
    pytest.param(QUEUED, ev.DependencyFailed("x"), Phase.ENDED, EntryState.DEPENDENCY_FAILED,
                 ["Move", "Forget", "Count"], id="dependency-failed"),
    pytest.param(QUEUED, ev.Requeue(), Phase.QUEUED, None, [], id="requeue-queued-stays"),
    pytest.param(REGISTERING, ev.RegisterOk(0), Phase.ADMITTED, None, ["MarkRegistered", "WatchDeadline"],
                 id="register-ok"),
    pytest.param(REGISTERING, ev.RegisterOk(1), Phase.ADMITTED, None, [], id="reply-of-another-attempt"),
    pytest.param(REGISTERING, ev.RegisterLost(0, "down"), Phase.ADMITTED, None, ["RetryRegister", "Unreachable"],
                 id="register-lost-keeps-pins"),
    pytest.param(REGISTERING, ev.RegisterRefused(0, "bad"), Phase.ENDED, EntryState.FAILED,
                 ["Move", "Release", "Forget", "Wake"], id="register-refused-no-stop"),
    pytest.param(RETRY_RUNNING, ev.RegisterRefused(0), Phase.RUNNING, None, ["MarkRegistered"],
                 id="retry-never-sent-after-the-job-runs-is-no-refusal"),
    pytest.param(RETRY_RUNNING, ev.RegisterLost(0, "timeout"), Phase.RUNNING, None, ["MarkRegistered"],
                 id="retry-lost-after-the-job-runs-needs-no-retry"),
    pytest.param(REGISTERING, ev.Cancel(), Phase.DRAINING, EntryState.CANCELLED,
                 ["Unhold", "Move", "Drain", "Forget", "Wake"], id="cancel-in-flight-waits-for-reply"),
    pytest.param(DRAIN_IN_FLIGHT, ev.RegisterOk(0), Phase.DRAINING, EntryState.CANCELLED, ["Stop"],
                 id="stop-after-reply"),
    pytest.param(DRAIN_IN_FLIGHT, ev.RegisterRefused(0), Phase.ENDED, EntryState.CANCELLED,
                 ["StopDone", "ReleaseDrained"], id="never-sent-nothing-to-stop"),
    pytest.param(RETRY, ev.TimerFired(ev.Timer.RETRY), Phase.ADMITTED, None, ["Register"], id="retry-register"),
    pytest.param(REGISTERED, ev.TimerFired(ev.Timer.RETRY), Phase.ADMITTED, None, [], id="acknowledged-never-again"),
    pytest.param(REGISTERED, ev.Resume(), Phase.ADMITTED, None, [], id="resume-acknowledged-never-again"),
    pytest.param(REGISTERED, ev.AllocUpdate("a1"), Phase.RUNNING, None, ["Move", "Started"], id="placed-runs"),
    pytest.param(REGISTERED, ev.TimerFired(ev.Timer.DEADLINE, "late"), Phase.DRAINING, EntryState.QUEUED,
                 ["Avoid", "Move", "Drain", "Requeued", "Stop", "Wake", "Count"], id="admission-deadline"),
    pytest.param(REGISTERED, ev.EvalRefused("no driver"), Phase.DRAINING, EntryState.QUEUED,
                 ["Avoid", "Move", "Drain", "Requeued", "Stop", "Wake", "Count"], id="evaluation-refused"),
    pytest.param(RUNNING, ev.EvalRefused("no driver"), Phase.RUNNING, None, [], id="placed-ignores-evaluation"),
    pytest.param(RUNNING, OK_ALLOC, Phase.ENDED, EntryState.COMPLETE,
                 ["Move", "Release", "Forget", "Wake", "Count"], id="complete-releases-now"),
    pytest.param(RUNNING, ev.AllocUpdate("a1", terminal=True, succeeded=True, outcome="complete"), Phase.DRAINING,
                 EntryState.COMPLETE, ["Move", "Drain", "Forget", "Stop", "Wake", "Count"],
                 id="service-exit-0-drains"),
    pytest.param(TWO, OK_ALLOC, Phase.RUNNING, None, [], id="one-of-two-complete"),
    pytest.param(RUNNING, FAILED_ALLOC, Phase.DRAINING, EntryState.QUEUED,
                 ["Move", "Drain", "Requeued", "Stop", "Wake", "Count"], id="interrupted-retries"),
    pytest.param(LAST_TRY, FAILED_ALLOC, Phase.DRAINING, EntryState.FAILED,
                 ["Move", "Drain", "Forget", "Stop", "Wake", "Count"], id="interrupted-fails"),
    pytest.param(RUNNING, ev.TimerFired(ev.Timer.RUNTIME, "timeout"), Phase.DRAINING, EntryState.FAILED,
                 ["Move", "Drain", "Forget", "Stop", "Wake", "Count"], id="max-runtime"),
    pytest.param(RUNNING, ev.Hold(True), Phase.RUNNING, None, ["Unhold", "Reject"], id="hold-live-refused"),
    pytest.param(RUNNING, ev.JobGone(), Phase.ENDED, EntryState.FAILED, ["Move", "Release", "Forget", "Wake"],
                 id="gone-never-run-twice"),
    pytest.param(RUNNING, ev.AllocUpdate("a1", terminal=True, outcome="evicted", preempted="preempted by x"),
                 Phase.ENDED, EntryState.QUEUED, ["Move", "Release", "Requeued", "Stop", "Wake", "Count"],
                 id="nomad-preempted-released-requeued"),
    pytest.param(TWO, ev.AllocUpdate("a1", terminal=True, outcome="evicted", preempted="preempted by x"),
                 Phase.DRAINING, EntryState.QUEUED, ["Move", "Drain", "Requeued", "Stop", "Wake", "Count"],
                 id="nomad-preempted-one-of-two-drains"),
    pytest.param(RUNNING, ev.Preempt("preempted by q2 (serving) on n1"), Phase.PREEMPTING, None, ["Move", "Stop"],
                 id="preempt-stops-and-keeps-its-capacity"),
    pytest.param(REGISTERED, ev.Preempt(), Phase.DRAINING, EntryState.QUEUED,
                 ["Move", "Drain", "Requeued", "Stop", "Wake", "Count"], id="preempt-admitted-drains-and-requeues"),
    pytest.param(PREEMPTING, KILLED, Phase.PREEMPTING, None, [], id="preempting-waits-for-the-stop"),
    pytest.param(PREEMPTING, ev.StopConfirmed((("a1", False),)), Phase.PREEMPTING, None, [],
                 id="preempting-stopped-alloc-still-running"),
    pytest.param(PREEMPTING_STOPPED, KILLED, Phase.ENDED, EntryState.QUEUED,
                 ["Move", "Release", "Requeued", "Wake", "Count"], id="preempted-requeued-when-terminal"),
    pytest.param(PREEMPTING_STOPPED, SAVED, Phase.ENDED, EntryState.COMPLETE,
                 ["Move", "Release", "Forget", "Wake", "Count"], id="exit-0-in-grace-completes"),
    pytest.param(PREEMPTING_STOPPED, ev.AllocUpdate("a1"), Phase.PREEMPTING, None, [], id="preempting-still-running"),
    pytest.param(PREEMPTING, ev.Cancel(), Phase.DRAINING, EntryState.CANCELLED,
                 ["Unhold", "Move", "Drain", "Forget", "Stop", "Wake"], id="cancel-preempting-drains"),
    pytest.param(PREEMPTING, ev.Requeue(), Phase.PREEMPTING, None, ["Reject"], id="requeue-preempting-refused"),
    pytest.param(PREEMPTING, ev.TimerFired(ev.Timer.RUNTIME, "timeout"), Phase.PREEMPTING, None, [],
                 id="preempting-ignores-max-runtime"),
    pytest.param(PREEMPTING, ev.Preempt(), Phase.PREEMPTING, None, [], id="preempt-twice-nothing"),
    pytest.param(PREEMPTING, ev.JobGone(), Phase.ENDED, EntryState.QUEUED,
                 ["Move", "Release", "Requeued", "Wake", "Count"], id="preempting-job-gone-requeued"),
    pytest.param(RUNNING, ev.Reclaim(), Phase.DRAINING, EntryState.QUEUED,
                 ["Move", "Drain", "Requeued", "Stop", "Wake", "Count"], id="reclaim-drains-and-requeues"),
    pytest.param(RUNNING, ev.Reclaim("idle 31 min: stopped for q2", requeue=False), Phase.DRAINING,
                 EntryState.RECLAIMED, ["Move", "Drain", "Forget", "Stop", "Wake", "Count"],
                 id="idle-reclaim-stops-it-reclaimed-and-drains"),
    pytest.param(DRAINING, ev.Reclaim(requeue=False), Phase.DRAINING, EntryState.CANCELLED, [],
                 id="a-reclaim-of-a-draining-attempt-changes-nothing"),
    pytest.param(RUNNING, ev.LeaseLost(), Phase.RUNNING, None, ["Forget"], id="lease-lost-forgets"),
    pytest.param(DRAINING, ev.StopConfirmed((("a1", True),)), Phase.DRAINING, EntryState.CANCELLED, [],
                 id="stopped-but-allocation-still-running"),
    pytest.param(STOPPED, FAILED_ALLOC, Phase.ENDED, EntryState.CANCELLED, ["ReleaseDrained"],
                 id="drained-releases"),
    pytest.param(DRAINING, FAILED_ALLOC, Phase.DRAINING, EntryState.CANCELLED, [], id="not-stopped-keeps"),
    pytest.param(DRAIN_IN_FLIGHT, ev.StopConfirmed(), Phase.DRAINING, EntryState.CANCELLED, [],
                 id="register-in-flight-keeps"),
    pytest.param(ENDED, ev.Requeue(), Phase.ENDED, EntryState.COMPLETE, ["Reject"], id="requeue-ended-refused"),
    pytest.param(ENDED, ev.Cancel(), Phase.ENDED, EntryState.COMPLETE, ["Unhold"], id="cancel-ended-nothing"),
])
def test_transition(record: Record, event: ev.Event, phase: Phase, outcome: EntryState | None,
                    effects: list[str]) -> None:
    after, done = apply(record, event)
    assert (after.phase, after.outcome, names(done)) == (phase, outcome, effects)


def test_an_end_is_stored_with_its_stop_before_the_capacity_moves() -> None:
    _, effects = apply(RUNNING, ev.Cancel())
    move = next(fx for fx in effects if isinstance(fx, ev.Move))
    assert move.stop and move.expect == LIVE
    assert names(effects).index("Move") < names(effects).index("Drain") < names(effects).index("Stop")


def test_a_requeue_uses_no_retry_and_a_refusal_says_so() -> None:
    for event in (ev.Requeue(), ev.Preempt(), ev.Reclaim(), ev.EvalRefused("x")):
        move = next(fx for fx in apply(REGISTERED, event)[1] if isinstance(fx, ev.Move))
        assert move.to is EntryState.QUEUED and move.requeue and move.refused, event
    move = next(fx for fx in apply(RUNNING, FAILED_ALLOC)[1] if isinstance(fx, ev.Move))
    assert move.requeue and not move.refused and not move.durable


def test_an_idle_reclaim_is_stored_terminal_with_its_reason_and_its_stop() -> None:
    after, effects = apply(RUNNING, ev.Reclaim("idle 31 min: stopped for q2", requeue=False))
    move = next(fx for fx in effects if isinstance(fx, ev.Move))
    assert (move.to, move.reason, move.stop, move.requeue) == (EntryState.RECLAIMED, "idle 31 min: stopped for q2",
                                                                True, False)
    assert move.to.is_terminal() and not move.to.holds_capacity()
    assert after.booked and ev.Count("reclaimed") in effects  # its devices stay booked until Nomad stopped it
    assert apply(after, ev.Reclaim(requeue=False)) == (after, ())  # a second reclaim (two reviews) does nothing


def test_every_stored_move_is_one_the_store_allows() -> None:
    """Each `Move` of the whole table goes from a state it expects to one TRANSITIONS allows (or stays)."""
    for record in [*STATES.values(), TWO, LAST_TRY]:
        for event in EVENTS.values():
            for fx in apply(record, event)[1]:
                if isinstance(fx, ev.Move):
                    assert record.state in fx.expect, (record, event, fx)
                    assert fx.to is record.state or fx.to in TRANSITIONS[record.state], (record, event, fx)


def test_capacity_is_held_while_live_or_draining_and_only_then() -> None:
    for record in STATES.values():
        for event in EVENTS.values():
            after, effects = apply(record, event)
            kinds = set(names(effects))
            if after.phase is Phase.ENDED and record.holds_capacity:
                assert kinds & {"Release", "ReleaseDrained"}, (record, event)
            if after.phase is Phase.DRAINING and record.phase.live:
                assert "Drain" in kinds and "Release" not in kinds, (record, event)
            if "ReleaseDrained" in kinds:
                assert record.stopped or "StopDone" in kinds, (record, event)
                assert not after.open and not after.registering, (record, event)


def test_the_contributing_guide_shows_the_table_of_the_code() -> None:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(r"<!-- life-table:start -->\n(.*?)<!-- life-table:end -->", text, re.S)
    assert found is not None, "docs/CONTRIBUTING.md has no generated life-of-a-job table"
    assert found.group(1) == render(), "regenerate it: python -m nomad_gpu.service.life.table"
    assert len(rows()) > 50


def test_a_preemption_is_stored_with_its_stop_and_its_end_uses_no_retry() -> None:
    """running -> preempting: the reason naming the preemptor and the stop intent in one write, the capacity
    kept; preempting -> queued when every allocation is terminal: a new attempt, counted as a refusal."""
    after, effects = apply(RUNNING, ev.Preempt("preempted by q2 (serving) on n1"))
    move = effects[0]
    assert isinstance(move, ev.Move) and move.to is EntryState.PREEMPTING and move.stop
    assert move.expect == (EntryState.RUNNING,) and move.reason == "preempted by q2 (serving) on n1"
    assert after.holds_capacity and after.state is EntryState.PREEMPTING
    after, _ = apply(after, ev.StopConfirmed())
    done, effects = apply(after, KILLED)
    move = effects[0]
    assert isinstance(move, ev.Move) and move.to is EntryState.QUEUED and move.requeue and move.refused
    assert move.reason is None, "the preemptor's reason stays"
    assert not done.holds_capacity
    assert apply(done, KILLED) == (done, ()), "a duplicated report requeues nothing twice"
