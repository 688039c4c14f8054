"""The contract: entries stored all or nothing, their IDs, idempotency keys, reads and listings."""

from __future__ import annotations

import pytest

from nomad_gpu.domain.errors import UnknownEntry
from nomad_gpu.store import EntryState, QueueEntry, Store
from nomad_gpu.store.entries import parse_job_id
from tests.store.contract.conftest import StoreFactory, entry


def test_ids_are_assigned_in_order_and_never_given_again(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    stored = store.add([entry("a"), entry("b")])
    assert [e.id for e in stored] == ["q000001", "q000002"]
    assert all(e.job_prefix == store.instance and e.state is EntryState.QUEUED for e in stored)
    if store_factory.persistent:
        store = store_factory.reopen(store)
    assert [e.name for e in store.list()] == ["a", "b"]
    assert store.add([entry("c")])[0].id == "q000003"


def test_a_database_keeps_its_instance_and_two_never_share_one(store_factory: StoreFactory) -> None:
    a, b = store_factory.open("a"), store_factory.open("b")
    assert a.created and b.created and len(a.instance) == 6
    ja, jb = a.add([entry()])[0].nomad_job_id, b.add([entry()])[0].nomad_job_id
    assert ja != jb
    ref = parse_job_id(ja)
    assert ref is not None and ref.instance == a.instance and ref.entry == "q000001"
    if store_factory.persistent:
        again = store_factory.reopen(a, "a")
        assert again.instance == a.instance and not again.created


def test_an_idempotency_key_returns_the_first_submission(store: Store) -> None:
    first = store.add([entry("a", key="k1")])
    second = store.add([entry("other", key="k1"), entry("new", key="k2")])
    assert second[0].id == first[0].id and second[0].name == "a"
    assert [e.name for e in store.list()] == ["a", "new"]


def test_a_failing_batch_stores_nothing(store: Store) -> None:
    store.add([entry("a")])
    clash = QueueEntry(id="q000001", name="clash", team="t", priority=50, spec={}, submitted_at=0.0)
    with pytest.raises(Exception):  # noqa: B017  (the implementation's own integrity error)
        store.add([entry("b", key="kb"), clash])
    assert [e.name for e in store.list()] == ["a"]
    assert store.add([entry("b", key="kb")])[0].name == "b"  # the key was not kept either


def test_an_unknown_entry(store: Store) -> None:
    with pytest.raises(UnknownEntry):
        store.get("q999999")


def test_an_entry_reads_back_as_it_was_stored(store: Store) -> None:
    spec: dict[str, object] = {"name": "a", "nested": {"null": None, "list": [1, "x", {"k": False}]}, "n": 1.5}
    new = QueueEntry(id="", name="a", team="ml", priority=70, spec=spec, submitted_at=12.5, max_retries=3,
                     idempotency_key="k", namespace="research", reason="why")
    (stored,) = store.add([new])
    got = store.get(stored.id)
    assert got == stored
    assert (got.spec, got.team, got.priority, got.submitted_at, got.max_retries, got.namespace, got.reason) == (
        spec, "ml", 70, 12.5, 3, "research", "why")


def test_a_sweeps_trials_read_back_whole(store: Store) -> None:
    """Trials added together share their sweep's spec as stored; each reads back with its own values."""
    specs: list[dict[str, object]] = [{"name": "hpo", "env": {"PAD": "x" * 2000, "LR": str(i)}, "args": [i, None]}
                                      for i in range(5)]
    specs[3] = {"name": "hpo", "other": True}  # a trial far from the first
    sweep = store.new_sweep_id("hpo")
    stored = store.add([entry(f"t{i}", sweep=sweep, spec=s) for i, s in enumerate(specs)])
    assert [store.get(e.id).spec for e in stored] == specs
    assert [e.spec for e in store.list(sweep=sweep)] == specs


def test_listing_filters_orders_and_pages(store: Store) -> None:
    sweep = store.new_sweep_id("s")
    a, b, c, d, e = store.add([entry("train-a", team="x"), entry("train-b", team="y"),
                               entry("eval-c", team="x", sweep=sweep), entry("eval-d", team="x", sweep=sweep),
                               entry("train-e", team="x")])
    store.transition(b.id, EntryState.ADMITTED, expect=(EntryState.QUEUED,))
    store.transition(d.id, EntryState.CANCELLED, expect=(EntryState.QUEUED,), finished_at=2.0)

    def ids(found: list[QueueEntry]) -> list[str]:
        return [x.id for x in found]

    assert ids(store.list()) == [a.id, b.id, c.id, d.id, e.id]
    assert ids(store.list([EntryState.QUEUED])) == [a.id, c.id, e.id]
    assert ids(store.list([EntryState.ADMITTED, EntryState.CANCELLED])) == [b.id, d.id]
    assert ids(store.list([])) == []
    assert ids(store.list(sweep=sweep)) == [c.id, d.id]
    assert ids(store.list(team="x")) == [a.id, c.id, d.id, e.id]
    assert ids(store.list(name_glob="train-*")) == [a.id, b.id, e.id]
    assert ids(store.list(name_glob="*-[!ab]")) == [c.id, d.id, e.id]
    assert ids(store.list(name_glob="*-[^ab]")) == [c.id, d.id, e.id]
    assert ids(store.list(name_glob="TRAIN-*")) == []  # case-sensitive
    assert ids(store.list(name_glob="eval-?")) == [c.id, d.id]
    # filters apply before the page is cut
    assert ids(store.list([EntryState.QUEUED], team="x", limit=2)) == [a.id, c.id]
    assert ids(store.list([EntryState.QUEUED], team="x", limit=2, offset=1)) == [c.id, e.id]
    assert ids(store.list(None, offset=3)) == [d.id, e.id]
    assert ids(store.list(None, limit=0)) == []


def test_a_sweeps_states_in_order_without_a_spec(store: Store) -> None:
    sweep = store.new_sweep_id("s")
    trials = store.add([entry(f"t{i}", team="x", sweep=sweep) for i in range(3)])
    store.add([entry("other", team="x")])
    store.transition(trials[1].id, EntryState.CANCELLED, finished_at=1.0)
    assert store.sweep_states(sweep) == [(trials[0].id, EntryState.QUEUED), (trials[1].id, EntryState.CANCELLED),
                                         (trials[2].id, EntryState.QUEUED)]
    assert store.sweep_states(sweep, team="x") == store.sweep_states(sweep)
    assert store.sweep_states(sweep, team="y") == []
    assert store.sweep_states("nope") == []


def test_sweep_ids_are_never_handed_out_twice(store_factory: StoreFactory) -> None:
    store = store_factory.open()
    first = [store.new_sweep_id("hpo"), store.new_sweep_id("hpo"), store.new_sweep_id("other")]
    assert first == ["hpo-s1", "hpo-s2", "other-s3"]
    if store_factory.persistent:
        store = store_factory.reopen(store)
    assert store.new_sweep_id("hpo") == "hpo-s4"
