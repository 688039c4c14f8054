"""Client truth: what a node's client does while the servers cannot hear it (partitions.py cuts it off).

Kept apart from partitions.py because the write path (state.py, kills.py) asks it two questions at every
task start, exit and kill: is the node cut off, and does the servers' view still follow the task? A
task that ends unheard is recorded here (its real end, for the audit) and reported when the node
reconnects; the client's report overwrites the servers' `lost` (`nestedUpdateAllocFromClient`,
nomad/state/state_store.go, v2.0.5 and v1.10.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .allocs import Alloc, ClientStatus

KILLED = "Task successfully killed"  # kills.py's message for a finished kill

if TYPE_CHECKING:
    from .state import ClusterState


@dataclass
class Spell:
    """One partition of one node, for the audit."""

    node_id: str
    partitioned_at: float
    epoch: int
    healed_at: float | None = None
    marked_at: float | None = None
    """When the servers marked the node down or disconnected (None: healed within the TTL)."""
    marked: str = ""

    def audit(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "partitioned_at": self.partitioned_at, "healed_at": self.healed_at,
                "marked_at": self.marked_at, "marked": self.marked}


class Partitions:
    """The spells; the cluster state's lock guards them."""

    def __init__(self) -> None:
        self.spells: list[Spell] = []
        self.current: dict[str, Spell] = {}  # node ID -> its spell while cut off

    def audit(self) -> list[dict[str, Any]]:
        return [spell.audit() for spell in self.spells]


def cut_off(state: ClusterState, node_id: str) -> bool:
    return node_id in state.partitions.current


def unheard(state: ClusterState, alloc: Alloc) -> bool:
    """Its task runs where the servers cannot hear it end: a cut-off node, or one they called lost or unknown."""
    return (alloc.started_at is not None and alloc.task_ended_at is None
            and (cut_off(state, alloc.node_id) or alloc.client_status in (ClientStatus.LOST, ClientStatus.UNKNOWN)))


def find(state: ClusterState, alloc_id: str) -> Alloc | None:
    """An allocation the servers know, or one they garbage-collected (a lost one's task may run on)."""
    alloc = state.allocs.get(alloc_id)
    if alloc is None:
        alloc = next((a for a in reversed(state.reaped) if a.id == alloc_id), None)
    return alloc


def exits_unheard(state: ClusterState, alloc_id: str) -> bool:
    """The task exits by itself (its run time is over); True when partitions.py took it (see `unheard`, and a
    kill by its own client, partitions.py `_client_stop`).

    Inside its client's own kill (`stop_on_client_after`, partitions.py) the exit is the kill's exit
    result: `Terminated` with the task's code, then `Killed`, and `complete` (a killed task does not fail
    its allocation: `handleKill` took its result, `shouldRestart` emits `Killed`, task_runner.go v2.0.5)."""
    alloc = find(state, alloc_id)
    if alloc is None or not (unheard(state, alloc) or alloc.stopped_by_client):
        return False  # a kill its client began cut off goes on after the reconnect (`destroyImpl` waits)
    code = 1 if alloc.fails else 0
    if alloc.stopped_by_client:
        alloc.kill_exit_signal = 0
        task_ended(state, alloc, ClientStatus.COMPLETE, KILLED, exit_code=code)
    else:
        task_ended(state, alloc, ClientStatus.FAILED if alloc.fails else ClientStatus.COMPLETE)
    return True


def task_ended(state: ClusterState, alloc: Alloc, status: ClientStatus, detail: str = "", *,
               exit_code: int | None = None) -> None:
    """Client truth: the task is gone now. The servers learn it now, or when the node reconnects."""
    if alloc.task_ended_at is not None:
        return
    alloc.task_ended_at = state.clock()
    if alloc.id not in state.allocs:
        return  # garbage-collected meanwhile: the servers ignore a report on what they no longer know
    if cut_off(state, alloc.node_id):
        alloc.late_report, alloc.late_detail, alloc.late_exit_code = status, detail, exit_code
        return
    report(state, alloc, status, detail, exit_code=exit_code)


def report(state: ClusterState, alloc: Alloc, status: ClientStatus, detail: str = "", *,
           exit_code: int | None = None) -> None:
    """The client's report of how the task ended reaches the servers."""
    alloc.late_report, alloc.late_detail, alloc.late_exit_code = None, "", None
    if alloc.live:
        state._finish([alloc], status, detail, exit_code=exit_code)
        state._schedule()
        return
    if alloc.client_status is ClientStatus.LOST:
        index = state._next_index()
        alloc.move(status, index, state.clock(), detail, exit_code=exit_code)
        state._emit(index, [alloc.event("AllocationUpdated", index)])
