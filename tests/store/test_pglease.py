"""The leader's lease on PostgreSQL (store/pglease.py): one holder at a time, an epoch that only grows, a killed
holder noticed when its session ends, a silent one when its renewals stand still for a lease on the observer's
clock, and a deposed holder told so. Against the throwaway server of tests/store/pg.py; clocks are fakes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.store import open_store
from nomad_gpu.store.contract import StoreUnavailable
from nomad_gpu.store.leaseterms import LeaseLost
from nomad_gpu.store.lock import StoreLocked
from nomad_gpu.store.pglease import NotLeader, PgLease, epoch_check

pytestmark = pytest.mark.server


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db(pg_dsn: str) -> Iterator[str]:
    open_store(pg_dsn).close()  # the schema, with the lease row
    yield pg_dsn


def lease(dsn: str, clock: Clock, address: str) -> PgLease:
    return PgLease(dsn, 10.0, address, clock=clock)


def test_one_holder_at_a_time_and_its_address_is_published(db: str) -> None:
    clock = Clock()
    a, b = lease(db, clock, "http://a:4690"), lease(db, clock, "http://b:4690")
    try:
        assert a.try_acquire() and a.epoch == 1 and a.valid()
        assert not b.try_acquire() and b.epoch is None
        assert b.holder().address == "http://a:4690" and b.holder().epoch == 1
        assert b.seen.address == "http://a:4690" and b.seen.epoch == 1  # what the campaign step read
        a.renew()
        assert not b.try_acquire()
    finally:
        a.close()
        b.close()


def test_a_holder_whose_session_ends_is_replaced_at_once_with_a_new_epoch(db: str) -> None:
    clock = Clock()
    a, b = lease(db, clock, "a"), lease(db, clock, "b")
    try:
        assert a.try_acquire()
        a.close()  # as a killed process: the server ends the session and drops the lock
        assert b.try_acquire() and b.epoch == 2 and b.holder().address == "b"
        with pytest.raises(LeaseLost):
            a.renew()  # reconnects and finds epoch 2
    finally:
        a.close()
        b.close()


def test_a_holder_that_stops_renewing_is_ended_after_a_lease_on_the_standbys_clock(db: str) -> None:
    leader_clock, standby_clock = Clock(), Clock()
    a, b = lease(db, leader_clock, "a"), lease(db, standby_clock, "b")
    try:
        assert a.try_acquire()
        assert not b.try_acquire()  # first sight of (epoch 1, 0 renewals)
        standby_clock.now += 9.9
        assert not b.try_acquire()
        a.renew()  # a renewal resets what the standby measures
        standby_clock.now += 9.9
        assert not b.try_acquire()
        standby_clock.now += 9.9
        assert not b.try_acquire()
        # the leader is paused from here on: no renewal; it stopped writing at 8 s on its own clock
        leader_clock.now += 8.0
        assert not a.valid()
        standby_clock.now += 10.0
        assert b.try_acquire() and b.epoch == 2
        with pytest.raises(StoreUnavailable):
            a.renew()  # its session was ended
        with pytest.raises(LeaseLost, match="epoch 1"):
            a.renew()
        assert not a.valid()
    finally:
        a.close()
        b.close()


def test_the_leader_stops_writing_at_lease_minus_the_margin_after_the_renewal_it_sent(db: str) -> None:
    clock = Clock()
    a = lease(db, clock, "a")
    try:
        assert a.try_acquire()
        clock.now += 7.9
        assert a.valid()
        a.renew()
        clock.now += 7.9
        assert a.valid() and a.remaining_s() == pytest.approx(0.1)
        clock.now += 0.1
        assert not a.valid()
    finally:
        a.close()


def test_replicas_share_the_database_and_keep_store_copy_out(db: str, tmp_path: Path) -> None:
    one, two = open_store(db, replica=True), open_store(db, replica=True)
    try:
        with pytest.raises(StoreLocked):
            open_store(db, exclusive=True)
        code = CliRunner().invoke(main, ["store", "copy", db, str(tmp_path / "b.db")])
        assert code.exit_code == 2 and "in use" in code.output, code.output
    finally:
        one.close()
        two.close()
    open_store(db, exclusive=True).close()


def test_a_leader_that_lost_its_session_takes_the_lease_back_when_nobody_led_in_between(
        db: str) -> None:
    clock = Clock()
    a, b = lease(db, clock, "a"), lease(db, clock, "b")
    try:
        assert a.try_acquire() and a.epoch == 1
        # the server ends the leader's session (a restart, a cut connection)
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(holder_pid) FROM leader_lease")
        with pytest.raises(StoreUnavailable):
            a.renew()
        a.renew()  # its own epoch is still the row's: taken back, one epoch on
        assert a.epoch == 2 and a.valid()
        assert not b.try_acquire()
    finally:
        a.close()
        b.close()


def test_a_lapsed_leader_finding_a_newer_epoch_is_deposed(db: str) -> None:
    clock = Clock()
    a, b = lease(db, clock, "a"), lease(db, clock, "b")
    try:
        assert a.try_acquire()
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(holder_pid) FROM leader_lease")
        assert b.try_acquire() and b.epoch == 2
        with pytest.raises(StoreUnavailable):
            a.renew()
        with pytest.raises(LeaseLost, match="epoch 2"):
            a.renew()
    finally:
        a.close()
        b.close()


def test_a_takeover_ends_the_paused_leaders_open_write_and_fences_its_next_one(db: str) -> None:
    """A leader paused in the middle of a store write holds the lease row's key-share lock (`epoch_check`): the
    takeover ends every session of that process (by its application_name) instead of waiting for it."""
    leader_clock, standby_clock = Clock(), Clock()
    a, b = lease(db, leader_clock, "a"), lease(db, standby_clock, "b")
    paused = psycopg.connect(db, autocommit=True, application_name="nomad-gpu 1 paused")
    try:
        assert a.try_acquire()
        with psycopg.connect(db, autocommit=True) as admin:  # as if process "paused" held the lease
            admin.execute("UPDATE leader_lease SET holder_app = 'nomad-gpu 1 paused'")
        paused.execute("BEGIN")
        epoch_check(lambda: 1)(paused)  # its write transaction, open when the process stopped
        assert not b.try_acquire()
        standby_clock.now += 10.0
        assert b.try_acquire() and b.epoch == 2
        with pytest.raises(psycopg.OperationalError):
            paused.execute("SELECT 1")  # its session was ended: the write was rolled back
        with psycopg.connect(db, autocommit=True) as again, pytest.raises(NotLeader), again.transaction():
            epoch_check(lambda: 1)(again)  # what it writes next, after a reconnect, is refused
    finally:
        paused.close()
        a.close()
        b.close()
