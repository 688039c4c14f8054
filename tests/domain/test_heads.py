"""`heads`: starving jobs are offered first, oldest first, until `max_holds` of them hold nodes or got in, and
one that got neither does not use up a slot. Pure and direct, so a change of its bound (`>=` to `>`: one more
node held than configured) is caught in the fast loop, not only by the cycle's end-to-end figures."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nomad_gpu.domain.cycle import CycleState, heads
from nomad_gpu.domain.ids import EntryId, NodeId

from .builders import config, gpu_node, job, ledger_of


def offered(max_holds: int, held: set[str], n: int = 5) -> list[str]:
    """The entries `heads` yields from ``n`` starving jobs when those in ``held`` get a hold once offered."""
    starving = [job(f"q{i}", at=float(i)) for i in range(n)]
    snap: Any = SimpleNamespace(starving=starving)
    state = CycleState(holds={})
    out = []
    for j in heads(snap, ledger_of(gpu_node("n1", 1)), config(max_holds=max_holds), state):
        out.append(str(j.entry))
        if str(j.entry) in held:  # as decide() does for a starving head that does not fit: a node held for it
            state.holds[EntryId(str(j.entry))] = frozenset({NodeId("n1")})
    return out


@pytest.mark.parametrize(("max_holds", "held", "expected"), [
    pytest.param(1, {"q0", "q1", "q2", "q3", "q4"}, ["q0"], id="one-hold-one-head"),
    pytest.param(2, {"q0", "q1", "q2", "q3", "q4"}, ["q0", "q1"], id="two-holds-two-heads"),
    pytest.param(1, {"q2"}, ["q0", "q1", "q2"], id="heads-without-a-hold-use-no-slot"),
    pytest.param(0, {"q0"}, [], id="no-holds-no-heads"),
])
def test_heads_stop_at_max_holds_served(max_holds: int, held: set[str], expected: list[str]) -> None:
    assert offered(max_holds, held) == expected
