"""The write-ahead log on a full disk (issue 31, item 7): a write that fails for space and the first write
that succeeds again both checkpoint the log and truncate it, so the space the log held (SQLite keeps every
version of a page in it until a checkpoint) is the filesystem's again; those who wait for space (the
watcher's resync) hear that it returned. The disk is made full with SQLite's `max_page_count`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nomad_gpu.store import QueueEntry, SqliteStore
from nomad_gpu.store.sqlite import StoreFull

PAD = "x" * 3000


def entry(name: str) -> QueueEntry:
    return QueueEntry(id="", name=name, team="t", priority=50, spec={"name": name, "pad": PAD}, submitted_at=1.0)


def size(path: Path) -> int:
    return os.path.getsize(path) if path.exists() else 0


def test_a_write_failing_for_space_and_the_first_that_succeeds_again_truncate_the_log(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "q.db"))
    wal = tmp_path / "q.db-wal"
    returned: list[bool] = []
    store.space.listen(lambda: returned.append(True))
    try:
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count = {pages + 4}")
        with pytest.raises(StoreFull):
            for i in range(50):
                store.add([entry(f"a{i}")])
        assert store.space.full
        assert size(wal) == 0  # checkpointed and truncated after the failure
        with pytest.raises(StoreFull):  # still full: no second checkpoint needed, nobody told
            store.add([entry("still")])
        assert returned == []
        store._db.execute("PRAGMA max_page_count = 1073741823")
        store.add([entry("back")])
        assert not store.space.full and returned == [True]
        assert size(wal) == 0  # the first write after space returned truncated the log
        store.add([entry("next")])
        assert size(wal) > 0 and returned == [True]  # later writes go on as usual
        assert [e.name for e in store.list()][-2:] == ["back", "next"]
    finally:
        store.close()
