"""Unhealthy devices in the ledger: never offered, but what Nomad reports on one can still be booked.

Nomad leaves an allocation running on a device that turns unhealthy (nomad/structs/devices.go, v2.0.5:
unhealthy instances are only skipped for new placements). So a running entry booked again after a
restart, an ended attempt draining on it, or a foreign allocation may name an unhealthy device; refusing
that booking left the device unaccounted, and free the moment it turned healthy again while its old
tenant still ran."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nomad_gpu.domain.errors import LedgerConflict
from nomad_gpu.domain.freeindex import NodeFree
from nomad_gpu.domain.ids import EntryId, InstanceId, NodeId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.placement import AllocPlacement

from .builders import A100, H100, ledger_of, make_node, mig_slices, whole_gpus

N1 = NodeId("n1")
MIG3 = f"{H100} MIG 3g.40gb"


def _free(ledger: Ledger) -> NodeFree:
    nf = ledger.node_free(N1)
    assert nf is not None
    return nf


def test_a_placement_on_an_unhealthy_gpu_is_booked_and_stays_held_when_it_heals() -> None:
    gpus = whole_gpus("n1", 2, unhealthy=[0])
    ledger = ledger_of(make_node("n1", gpus=gpus, cpu=10_000, mem=10_000))
    assert list(_free(ledger).gpu_free) == [InstanceId("GPU-n1-1")], "an unhealthy GPU is not offered"
    with pytest.raises(LedgerConflict):  # nor can a new admission book it
        ledger.reserve(EntryId("new"), Team("t"), [AllocPlacement("g", 0, N1, 0, 0, (InstanceId("GPU-n1-0"),), A100)])
    running = AllocPlacement("g", 0, N1, 100, 100, (InstanceId("GPU-n1-0"),), A100, gpu_equivalents=1.0)
    ledger.reserve(EntryId("running"), Team("t"), [running], reported=True)
    ledger.set_node(make_node("n1", gpus=tuple(replace(g, healthy=True) for g in gpus), cpu=10_000, mem=10_000))
    assert _free(ledger).gpu_free[InstanceId("GPU-n1-0")] == 0, "still held by its tenant"


def test_a_placement_on_an_unhealthy_mig_instance_is_booked() -> None:
    migs = mig_slices("n1", "3g.40gb", 2, unhealthy=[0])
    ledger = ledger_of(make_node("n1", migs=migs, cpu=10_000, mem=10_000))
    p = AllocPlacement("g", 0, N1, 0, 0, (migs[0].id,), MIG3, gpu_equivalents=3 / 7)
    ledger.reserve(EntryId("running"), Team("t"), [p], reported=True)
    ledger.set_node(make_node("n1", migs=tuple(replace(m, healthy=True) for m in migs), cpu=10_000, mem=10_000))
    assert _free(ledger).mig_free[MIG3] == [migs[1].id]
