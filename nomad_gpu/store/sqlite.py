"""The queue in one SQLite file (WAL), behind the `Store` interface a replicated store can replace.

Every write is one transaction: a submission is either wholly stored or not at all, and a state
change is a compare-and-set against the states it may come from, so two writers (the cycle and a
cancel, say) can never both win. Parameterised SQL only.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from nomad_gpu.domain.errors import NomadGpuError, UnknownEntry
from nomad_gpu.store.entries import TRANSITIONS, EntryState, QueueEntry, dumps

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  team TEXT NOT NULL,
  priority INTEGER NOT NULL,
  spec TEXT NOT NULL,
  submitted_at REAL NOT NULL,
  state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_retries INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  placements TEXT NOT NULL DEFAULT '[]',
  admitted_at REAL,
  finished_at REAL,
  sweep TEXT,
  idempotency_key TEXT UNIQUE,
  history TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS entries_state ON entries(state);
CREATE INDEX IF NOT EXISTS entries_sweep ON entries(sweep);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class StaleTransition(NomadGpuError):
    """The entry was not in a state the change may start from (someone else moved it first)."""


class Store(Protocol):
    def add(self, entries: Sequence[QueueEntry]) -> list[QueueEntry]: ...
    def get(self, entry_id: str) -> QueueEntry: ...
    def list(self, states: Iterable[EntryState] | None = None, sweep: str | None = None,
             limit: int | None = None) -> list[QueueEntry]: ...
    def transition(self, entry_id: str, to: EntryState, **fields: Any) -> QueueEntry: ...
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def close(self) -> None: ...


class SqliteStore:
    """Thread-safe (one connection, one lock): the service's loops and API threads share it."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, entries: Sequence[QueueEntry]) -> list[QueueEntry]:
        """Store all or nothing. Entries with an empty id get a fresh, sortable one (`q000123`).
        An entry whose idempotency key is already stored returns the stored one instead."""
        out: list[QueueEntry] = []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for e in entries:
                    if e.idempotency_key:
                        found = self._db.execute("SELECT * FROM entries WHERE idempotency_key = ?",
                                                 (e.idempotency_key,)).fetchone()
                        if found is not None:
                            out.append(_row(found))
                            continue
                    if not e.id:
                        seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM entries").fetchone()[0]
                        e = replace(e, id=f"q{int(seq):06d}")
                    self._db.execute(
                        "INSERT INTO entries (id, name, team, priority, spec, submitted_at, state, attempts,"
                        " max_retries, reason, placements, sweep, idempotency_key, history)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (e.id, e.name, e.team, e.priority, dumps(e.spec), e.submitted_at, e.state.value,
                         e.attempts, e.max_retries, e.reason, dumps(list(e.placements)), e.sweep,
                         e.idempotency_key, dumps(list(e.history))),
                    )
                    out.append(e)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return out

    def get(self, entry_id: str) -> QueueEntry:
        with self._lock:
            row = self._db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise UnknownEntry(f"no queue entry {entry_id!r}")
        return _row(row)

    def list(self, states: Iterable[EntryState] | None = None, sweep: str | None = None,
             limit: int | None = None) -> list[QueueEntry]:
        sql = "SELECT * FROM entries WHERE 1=1"
        args: list[object] = []
        if states is not None:
            values = [s.value for s in states]
            sql += f" AND state IN ({','.join('?' * len(values))})"
            args.extend(values)
        if sweep is not None:
            sql += " AND sweep = ?"
            args.append(sweep)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with self._lock:
            return [_row(r) for r in self._db.execute(sql, args).fetchall()]

    def transition(self, entry_id: str, to: EntryState, **fields: Any) -> QueueEntry:
        """Move an entry along `TRANSITIONS` and set fields, atomically. StaleTransition if not allowed."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                current = self.get(entry_id)
                if to is not current.state and to not in TRANSITIONS[current.state]:
                    raise StaleTransition(f"{entry_id}: {current.state.value} -> {to.value} is not allowed")
                event = {"from": current.state.value, "to": to.value, "at": fields.get("at"),
                         "reason": fields.get("reason", "")}
                fields.pop("at", None)
                moved = replace(current, state=to, history=(*current.history, event)[-20:], **fields)
                self._db.execute(
                    "UPDATE entries SET state=?, attempts=?, reason=?, placements=?, admitted_at=?, finished_at=?,"
                    " history=? WHERE id=?",
                    (moved.state.value, moved.attempts, moved.reason, dumps(list(moved.placements)),
                     moved.admitted_at, moved.finished_at, dumps(list(moved.history)), entry_id),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return moved

    def set_reasons(self, reasons: Mapping[str, str]) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("UPDATE entries SET reason=? WHERE id=? AND state=?",
                                 [(r, e, EntryState.QUEUED.value) for e, r in reasons.items()])
            self._db.execute("COMMIT")

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value="
                             "excluded.value", (key, value))


def _row(r: sqlite3.Row) -> QueueEntry:
    return QueueEntry(
        id=r["id"], name=r["name"], team=r["team"], priority=r["priority"], spec=json.loads(r["spec"]),
        submitted_at=r["submitted_at"], state=EntryState(r["state"]), attempts=r["attempts"],
        max_retries=r["max_retries"], reason=r["reason"], placements=tuple(json.loads(r["placements"])),
        admitted_at=r["admitted_at"], finished_at=r["finished_at"], sweep=r["sweep"],
        idempotency_key=r["idempotency_key"], history=tuple(json.loads(r["history"])),
    )
