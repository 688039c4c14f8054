"""An allocation's life on its client: it starts, its task exits and Nomad's restart tracker decides what
follows (restart, complete, fail and reschedule), and it ends, releasing its devices.

`ClusterState`'s methods, bound on its class (`state.on_start`, `state._finish(...)`), so the timers and
every module that ends allocations reach them as before; `self` is the state. Kept apart from the
scheduler pass (scheduling.py) and the job writes (state.py): this is what the client reports.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from . import evals, migjobs, nodeops, restarts, services
from .allocs import Alloc, ClientStatus
from .clienttruth import cut_off, exits_unheard

if TYPE_CHECKING:
    from .state import ClusterState


def on_start(self: ClusterState, alloc_id: str) -> None:
    with self.lock:
        alloc = self.allocs.get(alloc_id)
        if alloc is None or alloc.client_status is not ClientStatus.PENDING:
            return  # stopped or lost before it started
        if any(self.allocs[v].live for v in alloc.preempted_allocations or ()) \
                or cut_off(self, alloc.node_id):
            return  # its victims are still being killed (systemjobs.py), or its node is cut off
        index = self._next_index()
        now = self.clock()
        alloc.move(ClientStatus.RUNNING, index, now)
        self._emit(index, [alloc.event("AllocationUpdated", index)])
        services.on_running(self, alloc)
        end = now + alloc.duration_s / self.speed
        self.timers.call_at(end, functools.partial(self.on_finish, alloc_id))


def on_finish(self: ClusterState, alloc_id: str) -> None:
    """The task exits by itself; Nomad's restart tracker says what follows (restarts.py): a
    service job's task that exits 0 is restarted or, with `attempts = 0`, fails its allocation."""
    with self.lock:
        if exits_unheard(self, alloc_id):
            return  # the servers cannot hear it end: reported when its node reconnects (partitions.py)
        alloc = self.allocs.get(alloc_id)
        if alloc is None or alloc.client_status is not ClientStatus.RUNNING or alloc.desired_status != "run":
            return  # gone, or being killed (kills.py ends it)
        code = migjobs.task_exit(self, alloc, 1 if alloc.fails else 0)  # a `node mig apply` acts here
        now = self.clock()
        decision = restarts.decide(alloc.restart or restarts.RestartPolicy(0, 0.0, 0.0, "fail"), alloc.job_type,
                                   code, alloc.restart_count, alloc.restart_window_start, now * self.speed)
        alloc.restart_count, alloc.restart_window_start = decision.count, decision.window_start
        if decision.verdict is restarts.Verdict.RESTARTING:
            index = self._next_index()
            alloc.move(ClientStatus.PENDING, index, now, exit_code=code,
                       restart_reason=restarts.restarting_message(decision))
            self._emit(index, [alloc.event("AllocationUpdated", index)])
            self.timers.call_at(now + decision.delay_s / self.speed, functools.partial(self.on_start, alloc_id))
            return
        failed = decision.verdict is restarts.Verdict.NOT_RESTARTING
        self._finish([alloc], ClientStatus.FAILED if failed else ClientStatus.COMPLETE, exit_code=code,
                     restart_reason=decision.reason)
        if failed and self._replaceable(alloc) and self._reschedule_allowed(alloc):
            self._requeue(alloc, evals.ALLOC_FAILURE)
        self._schedule()


def finish(self: ClusterState, allocs: list[Alloc], status: ClientStatus, detail: str = "", *,
           exit_code: int | None = None, restart_reason: str = "") -> None:
    """Move allocations to a terminal status in one frame, release their devices, and record
    when the terminal frame was handed to the stream."""
    index = self._next_index()
    now = self.clock()
    for alloc in allocs:
        alloc.move(status, index, now, detail, exit_code=exit_code, restart_reason=restart_reason)
        self.ledger.release(alloc.id)
        self.frees += 1
        del self.live[alloc.id]
        del self.live_by_node[alloc.node_id][alloc.id]
    handed = self._emit(index, [alloc.event("AllocationUpdated", index) for alloc in allocs])
    for alloc in allocs:
        alloc.terminal_event_at = handed
    services.on_stopped(self, {alloc.id for alloc in allocs})
    nodeops.settle_drains(self, {alloc.node_id for alloc in allocs})


def reschedule_allowed(self: ClusterState, alloc: Alloc) -> bool:
    ask = self.jobs[(alloc.namespace, alloc.job_id)].asks[alloc.task_group]
    failures = 0
    cursor: Alloc | None = alloc
    while cursor is not None:
        failures += cursor.client_status is ClientStatus.FAILED
        cursor = self.allocs.get(cursor.previous_allocation)
    return ask.reschedule_unlimited or failures <= ask.reschedule_attempts
