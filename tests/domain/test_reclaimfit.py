"""Whom an idle job's GPUs would go to: a waiting job that needs them, fits them and is within its quota."""

from __future__ import annotations

from nomad_gpu.domain.fairshare import FairShareConfig, TeamPolicy
from nomad_gpu.domain.ids import EntryId, Team
from nomad_gpu.domain.ledger import Ledger
from nomad_gpu.domain.reclaimfit import beneficiary
from tests.domain.builders import cycle, gpu_node, job, ledger_of, whole


def _full_two_node_cluster() -> Ledger:
    """n1 (2 GPUs) held by the idle session `idle` (1 GPU) and `busy` (1 GPU); n2 (1 GPU) by `other`."""
    ledger = ledger_of(gpu_node("n1", 2), gpu_node("n2", 1))
    assert cycle(ledger, [job("other", whole(1), team="ml")]).admitted  # best fit: the one-GPU node
    for entry in ("idle", "busy"):
        assert cycle(ledger, [job(entry, whole(1), team="lab")]).admitted
    assert {r.entry: r.placements[0].node for r in ledger.reservations()} == {"other": "n2", "idle": "n1",
                                                                               "busy": "n1"}
    return ledger


def test_a_waiting_job_that_fits_the_freed_gpu_is_the_beneficiary() -> None:
    ledger = _full_two_node_cluster()
    idle = next(EntryId(r.entry) for r in ledger.reservations() if r.entry == "idle")
    assert beneficiary(ledger, [idle], [job("w1", whole(1), team="ml")]) == "w1"


def test_nobody_waiting_or_nobody_fitting_is_no_beneficiary() -> None:
    ledger = _full_two_node_cluster()
    idle = EntryId("idle")
    assert beneficiary(ledger, [idle], []) is None
    assert beneficiary(ledger, [idle], [job("w2", whole(2), team="ml")]) is None  # n1 keeps `busy`: 1 GPU free
    assert beneficiary(ledger, [EntryId("busy"), idle], [job("w2", whole(2), team="ml")]) == "w2"


def test_a_job_held_back_by_its_quota_is_no_reason_to_stop_anyone() -> None:
    ledger = _full_two_node_cluster()
    fair = FairShareConfig(teams={Team("ml"): TeamPolicy(1.0, 1.0)})  # ml holds 1 of its 1 GPU already
    assert beneficiary(ledger, [EntryId("idle")], [job("w1", whole(1), team="ml")], fair) is None
    # the idle session's own team gets its GPU back under the quota it frees
    fair = FairShareConfig(teams={Team("lab"): TeamPolicy(1.0, 2.0)})
    assert beneficiary(ledger, [EntryId("idle")], [job("w1", whole(1), team="lab")], fair) == "w1"


def test_a_job_that_fits_what_is_free_already_does_not_need_the_victim() -> None:
    ledger = ledger_of(gpu_node("n1", 2))
    assert cycle(ledger, [job("idle", whole(1))]).admitted
    assert beneficiary(ledger, [EntryId("idle")], [job("w1", whole(1))]) is None  # n1's second GPU is free
    assert beneficiary(ledger, [EntryId("idle")], [job("w3", whole(3)), job("w2", whole(2))]) == "w2"  # in order
