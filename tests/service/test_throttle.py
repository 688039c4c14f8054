"""Sweep trials beyond `max_parallel`: which the cycle may consider, and the reason each held one gives."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nomad_gpu.service.loops.throttle import throttle, throttle_reason


@dataclass(frozen=True)
class E:
    id: str
    sweep: str | None = None


@pytest.mark.parametrize(("queued", "live", "limits", "kept", "held"), [
    pytest.param([E("q3", "s"), E("q1", "s"), E("q2", "s")], [], {"s": 2}, ["q1", "q2"],
                 {"q3": "sweep s at max_parallel 2: 0 running, 2 queued ahead"}, id="entry-order-takes-the-slots"),
    pytest.param([E("q4", "s"), E("q5", "s")], [E("q1", "s")], {"s": 2}, ["q4"],
                 {"q5": "sweep s at max_parallel 2: 1 running, 1 queued ahead"}, id="live-trials-count"),
    pytest.param([E("q4", "s"), E("q5")], [E("q1", "s"), E("q2", "s")], {"s": 2}, ["q5"],
                 {"q4": "sweep s at max_parallel 2: 2 running, 0 queued ahead"}, id="full-and-a-plain-job"),
    pytest.param([E("q4", "t")], [], {"s": 1}, ["q4"], {}, id="a-sweep-without-a-limit"),
])
def test_throttle(queued: list[E], live: list[E], limits: dict[str, int], kept: list[str],
                  held: dict[str, str]) -> None:
    keep, reasons = throttle(queued, live, limits)
    assert [queued[i].id for i in keep] == kept and reasons == held


def test_a_limit_lowered_below_the_running_count_never_says_a_negative() -> None:
    assert throttle_reason("s", 2, 3) == "sweep s at max_parallel 2: 3 running, 0 queued ahead"
