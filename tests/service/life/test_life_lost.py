"""A lost attempt (its node cut off from Nomad's servers) as transitions of the life (service/life/machine.py).

Nomad calls a silent node's allocations `lost` or `unknown`, but their tasks may still run there until the
client stops them itself (`disconnect { stop_on_client_after }`, client/heartbeatstop.go) or reconnects.
So the attempt is queued again without using a retry, and its capacity stays booked (draining) until the
allocation's client reports it ended, or until the bound after which its client has surely stopped it.
"""

from __future__ import annotations

from nomad_gpu.service.life import events as ev
from nomad_gpu.service.life.machine import apply
from nomad_gpu.service.life.record import Phase, Record
from nomad_gpu.store import EntryState

RUNNING = Record("q1", phase=Phase.RUNNING, booked=True, registered=True, open=frozenset({"a1"}))
"""Running, no retry left: a lost attempt must not fail for want of one."""
LOST = ev.AllocUpdate("a1", terminal=True, outcome="lost", cut_off="its node was cut off from Nomad")
UNKNOWN = ev.AllocUpdate("a1", cut_off="its node was cut off from Nomad")


def names(effects: tuple[ev.Effect, ...]) -> list[str]:
    return [type(fx).__name__ for fx in effects]


def test_a_lost_allocation_requeues_the_attempt_without_a_retry_and_keeps_its_capacity() -> None:
    after, effects = apply(RUNNING, LOST)
    assert after.phase is Phase.DRAINING and after.outcome is EntryState.QUEUED
    move = next(fx for fx in effects if isinstance(fx, ev.Move))
    assert (move.to, move.requeue, move.refused, move.stop) == (EntryState.QUEUED, True, True, True)
    assert move.reason == "its node was cut off from Nomad"
    assert names(effects) == ["Move", "Drain", "Requeued", "Stop", "Wake", "Count"]
    assert effects[-1] == ev.Count("lost")
    assert "a1" in after.open and "a1" not in after.done, "its task may still run: the capacity stays"


def test_an_unknown_allocation_ends_the_attempt_as_a_lost_one_does() -> None:
    after, effects = apply(RUNNING, UNKNOWN)
    assert (after.phase, after.outcome) == (Phase.DRAINING, EntryState.QUEUED)
    assert ev.Count("lost") in effects


def test_the_capacity_waits_for_the_clients_report_of_the_end() -> None:
    draining, _ = apply(RUNNING, LOST)
    stopped, effects = apply(draining, ev.StopConfirmed((("a1", False),)))
    assert stopped.phase is Phase.DRAINING and not effects, "Nomad stopped the job; the task may still run"
    again, effects = apply(stopped, LOST)  # a replay of `lost` changes nothing
    assert again.phase is Phase.DRAINING and not effects
    ended, effects = apply(stopped, ev.AllocUpdate("a1", terminal=True, complete=True, outcome="killed"))
    assert ended.phase is Phase.ENDED and names(effects) == ["ReleaseDrained"]


def test_the_capacity_is_released_once_the_bound_passed() -> None:
    draining, _ = apply(RUNNING, UNKNOWN)
    stopped, _ = apply(draining, ev.StopConfirmed((("a1", False),)))
    early, effects = apply(stopped, ev.CutOffExpired("a2"))
    assert early.phase is Phase.DRAINING and not effects, "another allocation's bound says nothing of a1"
    ended, effects = apply(stopped, ev.CutOffExpired("a1"))
    assert ended.phase is Phase.ENDED and names(effects) == ["ReleaseDrained"]


def test_a_bound_before_the_stop_is_confirmed_waits_for_the_stop() -> None:
    draining, _ = apply(RUNNING, LOST)
    settled, effects = apply(draining, ev.CutOffExpired("a1"))
    assert settled.phase is Phase.DRAINING and not effects
    ended, effects = apply(settled, ev.StopConfirmed((("a1", False),)))
    assert ended.phase is Phase.ENDED and names(effects) == ["ReleaseDrained"]


def test_a_lost_attempt_with_retries_left_keeps_them() -> None:
    with_retries = Record("q1", phase=Phase.RUNNING, booked=True, registered=True, open=frozenset({"a1"}),
                          retries_left=2)
    _, effects = apply(with_retries, LOST)
    move = next(fx for fx in effects if isinstance(fx, ev.Move))
    assert move.refused and move.to is EntryState.QUEUED, "a requeue that uses no retry"
    assert ev.Count("retried") not in effects
