"""An allocation Nomad placed on other devices than its pins (Nomad before 1.11.1 places a taken pin
short: scheduler/device.go `createOffer`, v1.10.5) is a failed attempt: stopped, its booking kept until
it ended, the entry queued again (without using a retry), and counted."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakes import Clock, FakeNomad, ManualExecutor, alloc, gpu_node, service, spec

from nomad_gpu.domain.ids import InstanceId
from nomad_gpu.store import EntryState, SqliteStore


@pytest.mark.parametrize("granted", [
    pytest.param((), id="none"),
    pytest.param(("GPU-n1-1",), id="short"),
    pytest.param(("GPU-n1-0", "GPU-n1-2"), id="a-stranger"),
])
def test_an_allocation_off_its_pins_is_stopped_drained_and_requeued(granted: tuple[str, ...]) -> None:
    clock, ex, nomad, store = Clock(), ManualExecutor(), FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 4)], [])
    (a,) = svc.submit(spec("a", gpus=2))
    svc.run_cycle()
    ex.run_all()
    first = store.get(a.id)
    pins = tuple(first.placements[0]["instance_ids"])
    assert len(pins) == 2 and set(granted) != set(pins)
    placed = replace(alloc(first.nomad_job_id, "running", devices=granted), resources_known=True,
                     device_ids=tuple(InstanceId(i) for i in granted))
    svc.on_alloc(placed)
    e = store.get(a.id)
    assert e.state is EntryState.QUEUED and e.retries_used == 0 and e.refusals == 1
    assert "not 2 of its pins" in e.reason
    assert svc.metrics.pin_mismatches._value.get() == 1
    ex.run_all()
    assert nomad.jobs[first.nomad_job_id].stopped
    # the booking is kept while the short allocation still runs
    held = {i for r in svc.ledger.reservations() for p in r.placements for i in p.instance_ids}
    assert set(pins) <= held


def test_the_booked_devices_run_as_usual() -> None:
    clock, ex, nomad, store = Clock(), ManualExecutor(), FakeNomad(), SqliteStore()
    svc = service(store, nomad, clock, ex)
    svc.on_resync([gpu_node("n1", 4)], [])
    (a,) = svc.submit(spec("a", gpus=2))
    svc.run_cycle()
    ex.run_all()
    first = store.get(a.id)
    pins = tuple(first.placements[0]["instance_ids"])
    placed = replace(alloc(first.nomad_job_id, "running", devices=pins), resources_known=True)
    svc.on_alloc(placed)
    assert store.get(a.id).state is EntryState.RUNNING
    assert svc.metrics.pin_mismatches._value.get() == 0
