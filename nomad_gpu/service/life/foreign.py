"""Allocations no queue entry claims still hold capacity: plain Nomad jobs (system jobs, services), and
jobs of ours whose entry is gone. Every one's GPUs, CPU and memory are booked in the ledger under a
team of their own, so the core never places onto what Nomad has already given away.

They are the life cycle's third schedule state beside a register in flight and draining (service/life/
machine.py): no entry's record claims them, so they are kept here, by allocation, for the life cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from nomad_gpu.domain.errors import LedgerConflict
from nomad_gpu.domain.ids import EntryId, InstanceId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement
from nomad_gpu.nomad.decode import AllocInfo

logger = logging.getLogger("nomad_gpu.service.life.lifecycle")

FOREIGN = Team("_nomad")


class ForeignAllocs:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.foreign: dict[str, AllocInfo] = {}

    def book(self, a: AllocInfo) -> bool:
        """Allocations of plain Nomad jobs (or of ours no entry claims) hold GPUs, CPU and memory too."""
        key = EntryId(f"nomad:{a.id}")
        if a.is_terminal and not a.cut_off:  # a lost one's task may run on, cut off: booked (life/cutoff.py)
            self.foreign.pop(a.id, None)
            return self.ledger.release(key) is not None
        if key in self.ledger:
            self.foreign[a.id] = a  # its latest word (a cut-off one's bound reads it)
            return False
        if not (a.device_ids or a.cpu_mhz or a.memory_mb) or self.ledger.node_free(a.node_id) is None:
            return False  # every allocation's CPU and memory count too (system jobs, plain jobs)
        p = AllocPlacement(group=a.task_group, index=0, node=a.node_id, cpu_mhz=a.cpu_mhz, memory_mb=a.memory_mb,
                           instance_ids=tuple(InstanceId(i) for i in a.device_ids), device_name=a.device_name,
                           gpu_equivalents=float(len(a.device_ids)))
        self.foreign[a.id] = a
        try:
            self.ledger.reserve(key, FOREIGN, [p], reported=True)  # Nomad runs it, even on a sick device
        except LedgerConflict as exc:
            holders = sorted(self.ledger.entries_on(a.node_id))
            logger.error("allocation %s of job %s (%s) holds devices the ledger gave to %s: %s", a.id, a.job_id,
                         a.client_status.value, holders, exc)
        return False

    def release_cut_off(self, alloc_id: str) -> bool:
        """A cut-off allocation's bound passed and no report came: its task is surely gone, its capacity free."""
        a = self.foreign.get(alloc_id)
        if a is None or not a.cut_off:
            return False
        del self.foreign[alloc_id]
        return self.ledger.release(EntryId(f"nomad:{alloc_id}")) is not None

    def reserve(self, entry: EntryId, team: Team, placements: Iterable[AllocPlacement]) -> None:
        try:
            self.ledger.reserve(entry, team, placements, reported=True)
        except LedgerConflict as exc:
            logger.error("reconcile: %s cannot be booked as Nomad reports it: %s", entry, exc)
