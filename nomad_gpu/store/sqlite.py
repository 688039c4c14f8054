"""The queue in one SQLite file (WAL): the reference implementation of the store contract (store/contract.py).

Every write is one transaction: a submission is either wholly stored or not at all, a cycle's
admissions commit or roll back together, and a state change is a compare-and-set against the states
it may come from, so two writers (the cycle and a cancel, say) can never both win. An entry's end and
the intent to stop its Nomad job are written in the same transaction, so a crash between the two
cannot leave a job running that nobody will stop. Acknowledged writes are fsynced
(`synchronous=FULL`): an entry the API acknowledged survives a power loss, and its ID is never reused.
Parameterised SQL only.
"""

from __future__ import annotations

import builtins
import json
import secrets
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from nomad_gpu.domain.errors import UnknownEntry
from nomad_gpu.store import specdiff
from nomad_gpu.store.connection import Transaction, open_checked
from nomad_gpu.store.contract import Admission, StaleTransition, StopIntent, Store, StoreDamaged, StoreFull
from nomad_gpu.store.counts import CountedSweeps, SweepCount
from nomad_gpu.store.entries import TRANSITIONS, EntryState, QueueEntry, dumps
from nomad_gpu.store.lock import DatabaseLock
from nomad_gpu.store.prune import PURGE_BATCH, make_room, new_sizes, purge_before
from nomad_gpu.store.quota import NewRow, TeamQuota, check_quota
from nomad_gpu.store.space import Space
from nomad_gpu.store.sqliterows import EntryRows
from nomad_gpu.store.sweeplist import SweepSummary, sweep_summaries
from nomad_gpu.store.usage import JobFacts, UsageTotals, record_ended, record_move, record_new, report
from nomad_gpu.store.usage import intervals as usage_intervals

__all__ = ["Admission", "SqliteStore", "StaleTransition", "StopIntent", "Store", "StoreDamaged", "StoreFull",
           "TeamQuota"]
"""The contract's values and errors (store/contract.py) and TeamQuota (store/quota.py) are read from here too."""


def sqlite_glob(pattern: str) -> str:
    """A shell-style glob written for SQLite's GLOB, which negates a set with `[^a]` only: `[!a]`, the
    shell's and `fnmatch`'s way, is turned into it (so both negate; the CLI matches the same way)."""
    return pattern.replace("[!", "[^")


class SqliteStore:
    """Thread-safe (one connection, one lock): the service's loops and API threads share it.

    `exclusive=True` (the service) takes the database's lock first: a second service on the same file
    fails with StoreLocked before it reads anything.
    """

    def __init__(self, path: str = ":memory:", *, exclusive: bool = False) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._file_lock: DatabaseLock | None = None
        if exclusive and path != ":memory:":
            self._file_lock = DatabaseLock(path)
            self._file_lock.acquire()
        try:
            self._db = open_checked(path)
        except BaseException:
            if self._file_lock is not None:
                self._file_lock.release()
            raise
        self._synchronous = "FULL"
        self.space = Space(self._db, path != ":memory:")
        """Whether the disk is full; the log checkpointed as a write fails for space and as space returns."""
        self._rows = EntryRows(self._db)
        """Entries decoded from their rows, the specs of those in flight kept (store/sqliterows.py)."""
        self.instance = self._instance()
        self.counts = CountedSweeps(self._db)
        """Each sweep's trials counted by outcome, kept as each transaction commits (store/counts.py)."""

    def _instance(self) -> str:
        """This database's job ID prefix, made once; kept in the file so it survives restarts. ``created``
        says whether it was made now: a new database (a lost or replaced one looks the same)."""
        self.created = False
        found = self.get_meta("instance")
        if found:
            return found
        self.created = True
        self._db.execute("INSERT OR IGNORE INTO kv (key, value) VALUES ('instance', ?)", (secrets.token_hex(3),))
        return str(self.get_meta("instance"))

    def new_sweep_id(self, name: str) -> str:
        """A sweep ID no other sweep of this database ever had (`<name>-s<n>`, n from a stored sequence,
        durable before it is handed out): two sweeps of one name submitted at one instant, by two teams
        or two CI jobs, never share an ID, a stored spec or a cancel."""
        with self._lock, self._tx():
            self._db.execute("INSERT INTO kv (key, value) VALUES ('sweep_seq', '1') ON CONFLICT(key) DO UPDATE"
                             " SET value = CAST(value AS INTEGER) + 1")
            n = int(self._db.execute("SELECT value FROM kv WHERE key = 'sweep_seq'").fetchone()[0])
        return f"{name}-s{n}"

    def close(self) -> None:
        with self._lock:
            self._db.close()
        if self._file_lock is not None:
            self._file_lock.release()

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[None]:
        """A transaction; `durable=False` commits without waiting for the disk (WAL, synchronous=NORMAL):
        it survives a crash of the process (kill -9), and only a power loss or kernel crash can undo it,
        never corrupt the file. For facts Nomad still holds and a resync re-derives; everything a user
        was told (a submission, a cancel) or that Nomad acts on (an admission) waits for the disk. A
        durable commit also makes every earlier one durable (one WAL file, fsynced whole)."""
        wanted = "FULL" if durable else "NORMAL"
        if wanted != self._synchronous:
            self._db.execute(f"PRAGMA synchronous={wanted}")
            self._synchronous = wanted
        self.counts.begin()
        with Transaction(self._db, self.space):
            yield
        self.counts.committed()

    def sweep_count(self, sweep: str) -> SweepCount | None:
        """A sweep's trials counted by outcome (store/counts.py), without reading one; None: no such sweep."""
        with self._lock:
            return self.counts.get(sweep)

    # ---- entries -----------------------------------------------------------------------------
    def add(self, entries: Sequence[QueueEntry], quota: TeamQuota | None = None, *,
            keep: Callable[[], Collection[str]] | None = None) -> list[QueueEntry]:
        """Store all or nothing. Entries with an empty id get a fresh, sortable one (`q000123`) and this
        database's job prefix. An entry whose idempotency key is already stored returns the stored one.
        With ``quota``, OverLimit (and nothing stored) when a team would hold more than it allows, and the
        team's oldest finished entries deleted when it would keep more than it may (store/prune.py) but
        those ``keep`` names (entry and sweep IDs that queued entries wait for)."""
        out: list[QueueEntry] = []
        shared = specdiff.sweep_bases(entries)
        bases = {sweep_id: dumps(base) for sweep_id, base in shared.items()}
        with self._lock, self._tx():
            plan: list[QueueEntry | NewRow] = []
            for e in entries:
                if e.idempotency_key:
                    found = self._db.execute("SELECT * FROM entries WHERE idempotency_key = ?",
                                             (e.idempotency_key,)).fetchone()
                    if found is not None:
                        plan.append(self._rows.entry(found))
                        continue
                base_id = e.sweep if e.sweep in bases else None
                stored = dumps(specdiff.diff(shared[base_id], e.spec)) if base_id else dumps(e.spec)
                plan.append(NewRow(e, base_id, stored))
            fresh = [p for p in plan if isinstance(p, NewRow)]
            sizes = new_sizes(fresh, bases)
            if quota is not None:
                check_quota(self._db, quota, fresh, bases)
                for team in sorted({p.entry.team for p in fresh}):
                    ours = [sizes[id(p)] for p in fresh if p.entry.team == team]
                    for gone in make_room(self._db, team, quota, len(ours), sum(ours), keep):
                        self._rows.specs.pop(gone, None)
                        self.counts.deleted()  # the sweep counters are counted afresh once this commits
            for sweep_id in sorted({p.base_id for p in fresh if p.base_id}):
                # a plain INSERT: a sweep ID already stored is an error, never another sweep's spec reused
                self._db.execute("INSERT INTO spec_bases (id, spec) VALUES (?, ?)", (sweep_id, bases[sweep_id]))
            for p in plan:
                if not isinstance(p, NewRow):
                    out.append(p)
                    continue
                e, base_id, stored_spec, size = p.entry, p.base_id, p.stored, sizes[id(p)]
                if not e.id:
                    seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM entries").fetchone()[0]
                    e = replace(e, id=f"q{int(seq):06d}", job_prefix=e.job_prefix or self.instance)
                self._db.execute(
                    "INSERT INTO entries (id, name, team, priority, spec, submitted_at, state, attempts,"
                    " max_retries, reason, placements, sweep, idempotency_key, history, job_prefix, namespace,"
                    " spec_base, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (e.id, e.name, e.team, e.priority, stored_spec, e.submitted_at, e.state.value,
                     e.attempts, e.max_retries, e.reason, dumps(list(e.placements)), e.sweep,
                     e.idempotency_key, dumps(list(e.history)), e.job_prefix, e.namespace, base_id, size),
                )
                if e.sweep:
                    self.counts.change(e.sweep, e.team, e.id, None, e.state)
                record_new(self._db, _facts(e), e.history)
                out.append(e)
        return out

    def get(self, entry_id: str) -> QueueEntry:
        with self._lock:
            row = self._db.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise UnknownEntry(f"no queue entry {entry_id!r}")
        return self._rows.entry(row)

    def list(self, states: Iterable[EntryState] | None = None, sweep: str | None = None,
             limit: int | None = None, offset: int = 0, *, team: str | None = None,
             name_glob: str | None = None) -> list[QueueEntry]:
        """Entries in submission order; ``team`` keeps one team's rows (filtered in SQL: another team's
        rows are never decoded for a team's view), ``name_glob`` the names a shell-style glob matches
        (``*``, ``?``, ``[...]``, ``[!...]``; case-sensitive). Filters apply before the page is cut."""
        sql = "SELECT * FROM entries WHERE 1=1"
        args: list[object] = []
        if team is not None:
            sql += " AND team = ?"
            args.append(team)
        if states is not None:
            values = [s.value for s in states]
            sql += f" AND state IN ({','.join('?' * len(values))})"
            args.extend(values)
        if sweep is not None:
            sql += " AND sweep = ?"
            args.append(sweep)
        if name_glob is not None:
            sql += " AND name GLOB ?"
            args.append(sqlite_glob(name_glob))
        sql += " ORDER BY seq"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            args.extend([-1 if limit is None else limit, offset])
        with self._lock:
            return [self._rows.entry(r) for r in self._db.execute(sql, args).fetchall()]

    def transition(self, entry_id: str, to: EntryState, *, expect: Iterable[EntryState] | None = None,
                   stop: StopIntent | None = None, durable: bool = True, **fields: Any) -> QueueEntry:
        """Move an entry along `TRANSITIONS` and set fields, atomically; with `stop`, record the intent to
        stop a Nomad job in the same transaction. StaleTransition when the entry is not in `expect` (or the
        table forbids the move). `durable=False` for moves a resync re-derives from Nomad (see `_tx`)."""
        with self._lock, self._tx(durable):
            moved = self._move(entry_id, to, expect, fields)
            if stop is not None:
                self._put_stop(stop)
        return moved

    def sweep_states(self, sweep: str, team: str | None = None) -> builtins.list[tuple[str, EntryState]]:
        """A sweep's trials as (ID, state), in order, without decoding a spec."""
        sql, args = "SELECT id, state FROM entries WHERE sweep = ?", [sweep]
        if team is not None:
            sql, args = sql + " AND team = ?", [sweep, team]
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY seq", args).fetchall()
        return [(str(r[0]), EntryState(r[1])) for r in rows]

    def cancel_queued(self, entry_ids: Sequence[str], at: float, reason: str) -> set[str]:
        """Cancel those of ``entry_ids`` still queued, in one durable commit; the IDs moved. Reads only the
        history of each (never its spec): a sweep's 10,000 trials cost one commit, not 10,000."""
        if EntryState.CANCELLED not in TRANSITIONS[EntryState.QUEUED]:  # the same table as every other move
            raise StaleTransition("queued -> cancelled is not allowed")
        moved: set[str] = set()
        queued, cancelled = EntryState.QUEUED.value, EntryState.CANCELLED.value
        event = {"from": queued, "to": cancelled, "at": at, "reason": reason}
        with self._lock, self._tx():
            for entry_id in entry_ids:
                row = self._db.execute("SELECT history, sweep FROM entries WHERE id = ? AND state = ?",
                                       (entry_id, queued)).fetchone()
                if row is None:
                    continue
                history = dumps([*json.loads(row[0]), event][-20:])
                self._db.execute("UPDATE entries SET state=?, finished_at=?, reason=?, history=?, size = size -"
                                 " LENGTH(CAST(history AS BLOB)) + ? WHERE id=? AND state=?",
                                 (cancelled, at, reason, history, len(history.encode()), entry_id, queued))
                record_ended(self._db, entry_id, cancelled, at)
                self._rows.specs.pop(entry_id, None)
                moved.add(entry_id)
                if row[1]:
                    self.counts.change(row[1], "", entry_id, EntryState.QUEUED, EntryState.CANCELLED)
        return moved

    def admit_many(self, admissions: Sequence[Admission], at: float) -> builtins.list[QueueEntry]:
        """A cycle's admissions, all or none: a failure leaves every entry queued (and raises)."""
        with self._lock, self._tx():
            return [self._move(a.entry_id, EntryState.ADMITTED, (EntryState.QUEUED,),
                               {"admitted_at": at, "at": at, "reason": "", "placements": a.placements})
                    for a in admissions]

    def _move(self, entry_id: str, to: EntryState, expect: Iterable[EntryState] | None,
              fields: dict[str, Any]) -> QueueEntry:
        current = self.get(entry_id)
        if expect is not None and current.state not in tuple(expect):
            raise StaleTransition(f"{entry_id}: is {current.state.value}, expected {_names(expect)}")
        if to is current.state:
            if "placements" in fields and tuple(fields["placements"]) != current.placements:
                raise StaleTransition(f"{entry_id}: already {to.value} with another placement")
        elif to not in TRANSITIONS[current.state]:
            raise StaleTransition(f"{entry_id}: {current.state.value} -> {to.value} is not allowed")
        if to.is_terminal():
            self._rows.specs.pop(entry_id, None)  # an ended entry is rarely read again: keep what is in flight
        at = fields.pop("at", None)
        event = {"from": current.state.value, "to": to.value, "at": at, "reason": fields.get("reason", "")}
        moved = replace(current, state=to, history=(*current.history, event)[-20:], **fields)
        if current.sweep:
            self.counts.change(current.sweep, current.team, entry_id, current.state, to)
        placements, history = dumps(list(moved.placements)), dumps(list(moved.history))
        self._db.execute(
            "UPDATE entries SET state=?, attempts=?, reason=?, placements=?, admitted_at=?, finished_at=?,"
            " history=?, registered_at=?, refusals=?, held=?, priority=?, size = size - LENGTH(CAST(history AS"
            " BLOB)) - LENGTH(CAST(placements AS BLOB)) + ? WHERE id=?",
            (moved.state.value, moved.attempts, moved.reason, placements,
             moved.admitted_at, moved.finished_at, history, moved.registered_at, moved.refusals,
             int(moved.held), moved.priority, len(history.encode()) + len(placements.encode()), entry_id),
        )
        record_move(self._db, _facts(moved), at)
        return moved

    def mark_registered(self, entry_id: str, attempt: int, at: float) -> bool:
        """Nomad acknowledged this attempt's register; False when the entry moved on meanwhile."""
        with self._lock, self._tx(durable=False):
            cur = self._db.execute("UPDATE entries SET registered_at=? WHERE id=? AND attempts=? AND state IN (?, ?)",
                                   (at, entry_id, attempt, EntryState.ADMITTED.value, EntryState.RUNNING.value))
            return cur.rowcount == 1

    def set_reasons(self, reasons: Mapping[str, str]) -> None:
        with self._lock, self._tx(durable=False):
            self._db.executemany("UPDATE entries SET reason=? WHERE id=? AND state=?",
                                 [(r, e, EntryState.QUEUED.value) for e, r in reasons.items()])

    def purge_finished(self, before: float) -> int:
        """Drop finished entries that ended before `before` (retention), a batch per transaction so that
        nobody waits for the whole of it; returns how many."""
        removed = 0
        while True:
            with self._lock, self._tx():
                n = purge_before(self._db, before, PURGE_BATCH)
                if n:
                    self.counts.deleted()  # sweep counters are rebuilt from what is left (store/counts.py)
            removed += n
            if n < PURGE_BATCH:
                return removed

    def usage_report(self, by: str, since: float, until: float, now: float,
                     team: str | None = None) -> builtins.list[UsageTotals]:
        """GPU accounting over [since, until] from the compact usage record (store/usage.py), never a spec."""
        with self._lock:
            return report(self._db, by, since, until, now, team)

    def usage_intervals(self, since: float, until: float, now: float,
                        team: str | None = None) -> builtins.list[tuple[str, float, float, float]]:
        with self._lock:
            return usage_intervals(self._db, since, until, now, team)

    def sweep_summaries(self, team: str | None = None) -> builtins.list[SweepSummary]:
        with self._lock:
            return sweep_summaries(self._db, team)

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database and truncate it: without this the log only ever grows
        (SQLite's automatic checkpoints reuse it but never shrink it), so freeing a little disk would not
        make room for the next write."""
        with self._lock:
            self.space.checkpoint()

    # ---- stop intents ------------------------------------------------------------------------
    def add_stop(self, stop: StopIntent) -> None:
        with self._lock, self._tx():
            self._put_stop(stop)

    def _put_stop(self, stop: StopIntent) -> None:
        self._db.execute("INSERT OR IGNORE INTO stops (job_id, namespace, reason, created_at, attempts, next_at)"
                         " VALUES (?, ?, ?, ?, 0, ?)",
                         (stop.job_id, stop.namespace, stop.reason, stop.created_at, stop.next_at))

    def stops(self, due_by: float | None = None) -> builtins.list[StopIntent]:
        sql, args = "SELECT * FROM stops", []
        if due_by is not None:
            sql, args = sql + " WHERE next_at <= ?", [due_by]
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY next_at, job_id", args).fetchall()
        return [StopIntent(r["job_id"], r["namespace"], r["reason"], r["created_at"], r["attempts"], r["next_at"])
                for r in rows]

    def stop_done(self, job_id: str, namespace: str) -> None:
        with self._lock, self._tx(durable=False):
            self._db.execute("DELETE FROM stops WHERE job_id=? AND namespace=?", (job_id, namespace))

    def stop_retry(self, job_id: str, namespace: str, next_at: float) -> None:
        with self._lock, self._tx(durable=False):
            self._db.execute("UPDATE stops SET attempts = attempts + 1, next_at=? WHERE job_id=? AND namespace=?",
                             (next_at, job_id, namespace))

    # ---- meta --------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._lock, self._tx():
            self._db.execute("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value="
                             "excluded.value", (key, value))


def _names(states: Iterable[EntryState]) -> str:
    return "/".join(s.value for s in states)


def _facts(e: QueueEntry) -> JobFacts:
    return JobFacts(e.id, e.team, e.spec, e.placements, e.state.value, e.submitted_at, e.finished_at, e.sweep)
