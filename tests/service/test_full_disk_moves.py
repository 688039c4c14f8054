"""A move the store refuses for space changes nothing the life cycle follows: once a write fits again, the
same report from Nomad (the resync after space returns) ends the attempt. Found by
tests/e2e/test_full_disk_recovery.py: the attempt's record had advanced past the refused write, so after the
disk emptied the resync saw nothing left to do and the entries stayed `running` whose jobs had completed."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.store import EntryState, SqliteStore
from nomad_gpu.store.contract import StoreFull


class FillingStore(SqliteStore):
    """SQLite whose transitions are refused for space while `full` is set."""

    full = False

    def transition(self, entry_id: str, to: EntryState, **fields: Any) -> Any:
        if self.full:
            raise StoreFull("the queue database's disk is full: nothing was stored")
        return super().transition(entry_id, to, **fields)


def test_a_completion_refused_for_space_is_taken_in_once_space_returns() -> None:
    clock, ex, nomad, store = Clock(), ManualExecutor(), FakeNomad(), FillingStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 1)], [])
    (a,) = svc.submit(spec("a"))
    svc.run_cycle()
    ex.run_all()
    job = store.get(a.id).nomad_job_id
    svc.on_alloc(alloc(job, "running", index=10))
    assert store.get(a.id).state is EntryState.RUNNING
    store.full = True
    with pytest.raises(StoreFull):
        svc.on_alloc(alloc(job, "complete", index=11))
    assert store.get(a.id).state is EntryState.RUNNING  # nothing was stored
    store.full = False
    svc.on_alloc(alloc(job, "complete", index=11))  # the resync's report, once a write fits again
    assert store.get(a.id).state is EntryState.COMPLETE
