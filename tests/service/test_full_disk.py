"""A full disk (issue 26, item 12): a write answered 500; it must be a 503 with `Retry-After` and the
reason. The write-ahead log was never checkpointed, so freeing a little space did not help: it is
checkpointed (and truncated) on a schedule. The disk is made full with SQLite's `max_page_count`."""

from __future__ import annotations

import os
from pathlib import Path

from starlette.testclient import TestClient

from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore
from tests.service.conftest import NoActuator
from tests.service.fakes import Clock

SPEC = "name: j\ntask: {image: i, env: {PAD: '" + "x" * 3000 + "'}}\n"


def test_a_full_database_is_503_with_retry_after(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "q.db"))
    service = SchedulerService(store, NoActuator(), SchedulingSettings())
    try:
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count = {pages + 2}")
        client = TestClient(create_app(service), raise_server_exceptions=False)
        answers = [client.post("/v1/jobs", content=SPEC, headers={"Content-Type": "application/yaml"})
                   for _ in range(5)]
        full = [r for r in answers if r.status_code != 201]
        assert full and all(r.status_code == 503 for r in full), [r.text for r in full]
        assert full[0].headers["retry-after"].isdigit() and "full" in full[0].json()["error"]
    finally:
        service.stop()


def test_the_write_ahead_log_is_checkpointed_on_a_schedule(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    service = SchedulerService(SqliteStore(str(tmp_path / "q.db")), NoActuator(), SchedulingSettings(), clock=clock)
    try:
        for i in range(200):
            service.submit({"name": f"j{i}", "task": {"image": "i", "env": {"PAD": "x" * 2000}}})
        wal = tmp_path / "q.db-wal"
        assert os.path.getsize(wal) > 100_000
        service.housekeeping()  # the first round runs at once
        assert os.path.getsize(wal) == 0
        service.submit({"name": "again", "task": {"image": "i"}})
        service.housekeeping()  # not due yet
        assert os.path.getsize(wal) > 0
        clock.now += 301
        service.housekeeping()
        assert os.path.getsize(wal) == 0
    finally:
        service.stop()
