"""A damaged queue database is reported, not used (issue 26, item 11): a zero-length file started an empty
queue under a new job prefix (the jobs it ran left unmanaged), and a corrupt page started "ready" and then
failed every cycle, with nothing in the status to say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import QueueEntry, SqliteStore
from nomad_gpu.store.sqlite import StoreDamaged
from tests.service.conftest import NoActuator


def filled(path: Path, n: int = 400) -> None:
    store = SqliteStore(str(path))
    store.add([QueueEntry(id="", name=f"j{i}", team="t", priority=50, spec={"pad": "x" * 500}, submitted_at=1.0)
               for i in range(n)])
    store.checkpoint()
    store.close()


def test_a_zero_length_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    path.write_bytes(b"")
    with pytest.raises(StoreDamaged, match="0 bytes"):
        SqliteStore(str(path), exclusive=True)


def test_a_corrupt_page_is_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    filled(path)
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(3 * page + 16, 3 * page + 2048):  # a b-tree page of the entries table, scribbled on
        data[offset] = 0xA5
    path.write_bytes(bytes(data))
    with pytest.raises(StoreDamaged, match="damaged"):
        SqliteStore(str(path), exclusive=True)


def test_a_sound_database_opens(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    filled(path, 10)
    assert len(SqliteStore(str(path), exclusive=True).list()) == 10


def test_cycle_failures_show_in_the_status(tmp_path: Path) -> None:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    try:
        def broken() -> None:
            raise RuntimeError("database disk image is malformed")

        service.run_cycle = broken  # type: ignore[assignment,method-assign]
        service.ready.set()
        service._cycle_once()
        service._cycle_once()
        status = service.status()
        assert status["cycle_failures"] == 2 and "malformed" in status["last_cycle_error"]
    finally:
        service.stop()
