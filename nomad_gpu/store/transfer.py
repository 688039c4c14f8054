"""`nomad-gpu store copy SRC DST`: a queue moved whole from one store to another (SQLite to PostgreSQL and
back), with the service stopped, into a destination that holds nothing yet.

Both ends are opened by the factory as the service opens them (`exclusive=True`: a SQLite file a service
still holds is refused by its lock, StoreLocked) and the rows are copied table by table, column for column
(the two schemas keep the same columns), in one transaction on the destination: a copy is wholly there
or not at all. The database's instance prefix is copied too, so the jobs Nomad runs for the queue keep
their owner. A destination that already holds entries, stop intents or named values is refused: a copy
never merges two queues.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.store.contract import Store
from nomad_gpu.store.pgrows import KEPT, TABLES
from nomad_gpu.store.postgres import PostgresStore
from nomad_gpu.store.sqlite import SqliteStore

MEMORY = ":memory:"
Tables = Iterator[tuple[str, list[str], list[Sequence[Any]]]]


class DestinationNotEmpty(InvalidRequest):
    """The destination already holds a queue (or part of one): nothing is copied over it."""


@dataclass(frozen=True)
class Copied:
    entries: int
    stops: int


def copy_between(src_location: str, dst_location: str) -> Copied:
    """Open both ends through the factory (as the service does: a SQLite file it serves is locked) and copy.
    A SQLite source must exist (opening it would make an empty one); nothing is written on any refusal."""
    from nomad_gpu.store.factory import is_postgres, open_store, sqlite_path
    from nomad_gpu.store.location import redacted

    if src_location == dst_location:
        raise InvalidRequest(f"{redacted(src_location)}: the source and the destination are the same database")
    if not is_postgres(src_location):
        path = sqlite_path(src_location)
        if path == MEMORY or not os.path.isfile(path):
            raise InvalidRequest(f"{src_location}: no such queue database file")
    src = open_store(src_location, exclusive=True)
    try:
        dst = open_store(dst_location, exclusive=True)
        try:
            return copy(src, dst, redacted(dst_location))
        finally:
            dst.close()
    finally:
        src.close()


def copy(src: Store, dst: Store, dst_name: str) -> Copied:
    """Every row of ``src`` into ``dst`` (which must hold nothing); what was copied."""
    if _holds_data(dst):
        raise DestinationNotEmpty(f"{dst_name} already holds a queue: copy into an empty database (nothing "
                                  "was written)")
    counted: dict[str, int] = {}

    def counting(tables: Tables) -> Tables:
        for table, columns, rows in tables:
            counted[table] = len(rows)
            yield table, columns, rows

    _load(dst, counting(_dump(src)))
    return Copied(entries=counted.get("entries", 0), stops=counted.get("stops", 0))


def _holds_data(store: Store) -> bool:
    if isinstance(store, PostgresStore):
        return store.holds_data()
    db = _sqlite(store)
    if any(db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in KEPT):
        return True
    return db.execute("SELECT 1 FROM kv WHERE key <> 'instance'").fetchone() is not None


def _dump(store: Store) -> Tables:
    if isinstance(store, PostgresStore):
        yield from store.dump()
        return
    db = _sqlite(store)
    for table in TABLES:
        cur = db.execute(f"SELECT * FROM {table}" + (" ORDER BY seq" if table == "entries" else ""))
        yield table, [c[0] for c in cur.description], [tuple(r) for r in cur.fetchall()]


def _load(store: Store, tables: Tables) -> None:
    if isinstance(store, PostgresStore):
        store.load(tables)
        return
    db = _sqlite(store)
    db.execute("BEGIN IMMEDIATE")
    try:
        for table, columns, rows in tables:
            if table == "kv":
                db.executemany("DELETE FROM kv WHERE key = ?", [(r[0],) for r in rows])
            marks = ", ".join("?" * len(columns))
            db.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    assert isinstance(store, SqliteStore)
    store.counts = type(store.counts)(db)  # counted afresh from the trials copied (store/counts.py)


def _sqlite(store: Store) -> sqlite3.Connection:
    if not isinstance(store, SqliteStore):
        raise InvalidRequest(f"a copy cannot read or write a {type(store).__name__}")
    return store._db


__all__ = ["Copied", "DestinationNotEmpty", "copy"]
