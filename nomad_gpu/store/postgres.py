"""The queue on PostgreSQL: the store contract (store/contract.py) for several services on one database.

The same semantics as the SQLite store, held by the database rather than by one process's lock:
- a state change reads its row `FOR UPDATE` and writes `... WHERE id = %s AND state = %s` in one
  transaction: a compare-and-set that two writers (two replicas, the cycle and a cancel) cannot both win;
- a team's limits are checked under a transaction-level advisory lock per team (`pg_advisory_xact_lock`),
  so two submissions of one team, on two connections, are counted one after the other. Chosen over
  SERIALIZABLE: a row lock (or this lock, for a team that has no row to lock) makes the second writer wait
  rather than fail, so no submission has to be retried, and teams never wait on each other;
- entry IDs and sweep numbers come from SEQUENCEs; an idempotency key is UNIQUE and inserted `ON CONFLICT
  DO NOTHING`: the same key sent on two connections at once waits for the first and returns its entry;
- sweep counters live in a table written in the same transaction (store/pgcounts.py).
READ COMMITTED throughout (each statement sees what committed before it began). One connection per store,
used under a lock by the service's threads, and opened again after the server comes back.
"""

from __future__ import annotations

import builtins
import json
import secrets
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, cast

import psycopg
from psycopg.rows import dict_row

from nomad_gpu.domain.errors import UnknownEntry
from nomad_gpu.store import pgcounts, pghistory, pgusage, specdiff
from nomad_gpu.store.contract import Admission, StaleTransition, StopIntent
from nomad_gpu.store.counts import SweepCount
from nomad_gpu.store.entries import TRANSITIONS, EntryState, QueueEntry, dumps, entry_of
from nomad_gpu.store.pgconnect import PgSpace, begun, checked_dsn, connect, hold_service_lock, live, translated
from nomad_gpu.store.pgglob import glob_regex
from nomad_gpu.store.pgrows import Transfer
from nomad_gpu.store.pgschema import migrate
from nomad_gpu.store.prune import PURGE_BATCH, new_sizes
from nomad_gpu.store.quota import NewRow, TeamQuota, adding, judge
from nomad_gpu.store.sweeplist import SweepSummary
from nomad_gpu.store.usage import JobFacts, UsageTotals

TEAM_LOCK = 0x6E67
"""First key of the advisory lock each team's submissions take (the second: hashtext of the team)."""
_LIVE = [s.value for s in EntryState if not s.is_terminal()]
_INSERT = (
    "WITH n AS (SELECT nextval('entry_seq') AS seq) INSERT INTO entries (seq, id, name, team, priority, spec,"
    " submitted_at, state, attempts, max_retries, reason, placements, sweep, idempotency_key, history, job_prefix,"
    " namespace, spec_base, size) SELECT n.seq, COALESCE(%s, 'q' || repeat('0', greatest(0, 6 -"
    " length(n.seq::text))) || n.seq::text), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM n"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, job_prefix")


class PostgresStore(Transfer):
    """Thread-safe (one connection, one lock); several stores, in several processes, share one database."""

    def __init__(self, location: str, *, exclusive: bool = False, replica: bool = False) -> None:
        self.location = checked_dsn(location)
        self.fence: Callable[[psycopg.Connection[tuple[Any, ...]]], None] = lambda db: None  # pglease.epoch_check
        self._holder: psycopg.Connection[tuple[Any, ...]] | None = None
        self._lock = threading.RLock()
        self.space = PgSpace()
        self._bases: dict[str, Any] = {}
        """Sweeps' shared specs, decoded (never changed once stored; a few sweeps are read at a time)."""
        self._db = connect(self.location)
        self._used = time.monotonic()
        try:
            with translated(self.location):
                if exclusive or replica:
                    self._holder = hold_service_lock(self.location, shared=replica)
                migrate(self._db)
                self.instance = self._instance()
        except BaseException:
            self._db.close()
            if self._holder is not None:
                self._holder.close()
            raise

    def _instance(self) -> str:
        """This database's job ID prefix, made by the first store to open it (``created``)."""
        made = self._db.execute("INSERT INTO kv (key, value) VALUES ('instance', %s) ON CONFLICT (key) DO NOTHING",
                                (secrets.token_hex(3),))
        self.created = made.rowcount == 1
        return str(self.get_meta("instance"))

    def _conn(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The connection, opened again when the last one was lost (StoreUnavailable while it cannot be)."""
        if not live(self._db, self._used):
            self._db = connect(self.location)
        self._used = time.monotonic()
        return self._db

    @contextmanager
    def _tx(self, durable: bool = True) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """One transaction. ``durable=False`` commits without waiting for the server's WAL flush
        (`synchronous_commit = off`): lost only if the database server itself crashes within a fraction of a
        second, never half written; for facts a resync re-derives from Nomad."""
        with translated(self.location, self.space), begun(self._conn, self.fence) as db:
            if not durable:
                db.execute("SET LOCAL synchronous_commit = off")
            yield db

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        with translated(self.location):
            yield self._conn()

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._holder is not None:
                self._holder.close()  # the server drops the session's advisory lock

    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints and vacuums on its own."""

    def new_sweep_id(self, name: str) -> str:
        with self._lock, self._read() as db:
            row = db.execute("SELECT nextval('sweep_seq')").fetchone()
        return f"{name}-s{int(row[0]) if row else 0}"

    def sweep_count(self, sweep: str) -> SweepCount | None:
        with self._lock, self._read() as db:
            return pgcounts.get(db, sweep)

    # ---- entries -----------------------------------------------------------------------------
    def add(self, entries: Sequence[QueueEntry], quota: TeamQuota | None = None, *,
            keep: Callable[[], Collection[str]] | None = None) -> builtins.list[QueueEntry]:
        """As SqliteStore.add: with ``quota``, the team's oldest finished entries but those ``keep`` names
        deleted when it would keep more than it may (store/pghistory.py), under its advisory lock."""
        shared = specdiff.sweep_bases(entries)
        bases = {sweep_id: dumps(base) for sweep_id, base in shared.items()}
        with self._lock, self._tx() as db:
            if quota is not None:  # before the keys are looked up: a submission waiting here sees the first's
                for team in sorted({e.team for e in entries}):
                    db.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (TEAM_LOCK, team))
            keys = [e.idempotency_key for e in entries if e.idempotency_key]
            found = {}
            if keys:
                with db.cursor(row_factory=dict_row) as cur:
                    found = {r["idempotency_key"]: r for r in cur.execute(
                        "SELECT * FROM entries WHERE idempotency_key = ANY(%s)", (keys,))}
            plan: list[QueueEntry | NewRow] = []
            for e in entries:
                if e.idempotency_key in found:
                    plan.append(self._entry(found[e.idempotency_key]))
                    continue
                base_id = e.sweep if e.sweep in bases else None
                stored = dumps(specdiff.diff(shared[base_id], e.spec)) if base_id else dumps(e.spec)
                plan.append(NewRow(e, base_id, stored))
            fresh = [p for p in plan if isinstance(p, NewRow)]
            sizes = new_sizes(fresh, bases)
            if quota is not None:
                self._check_quota(db, quota, fresh, bases)
                for team in sorted({p.entry.team for p in fresh}):
                    ours = [sizes[id(p)] for p in fresh if p.entry.team == team]
                    pghistory.make_room(db, team, quota, len(ours), sum(ours), keep)
            with db.cursor() as cur:
                cur.executemany("INSERT INTO spec_bases (id, spec) VALUES (%s, %s)",
                                [(s, bases[s]) for s in sorted({p.base_id for p in fresh if p.base_id})])
                params = [(p.entry.id or None, p.entry.name, p.entry.team, p.entry.priority, p.stored,
                           p.entry.submitted_at, p.entry.state.value, p.entry.attempts, p.entry.max_retries,
                           p.entry.reason, dumps(list(p.entry.placements)), p.entry.sweep, p.entry.idempotency_key,
                           dumps(list(p.entry.history)),
                           p.entry.job_prefix or (self.instance if not p.entry.id else ""), p.entry.namespace,
                           p.base_id, sizes[id(p)]) for p in fresh]
                stored_as: list[tuple[str, str] | None] = []
                if len(params) == 1:  # the usual submission: one statement, without pipeline mode's set-up
                    stored_as.append(cast("tuple[str, str] | None", cur.execute(_INSERT, params[0]).fetchone()))
                elif params:  # a sweep: its rows sent together (pipeline mode), each one's ID read back
                    cur.executemany(_INSERT, params, returning=True)
                    for _ in fresh:
                        stored_as.append(cast("tuple[str, str] | None", cur.fetchone()))
                        cur.nextset()
            out: list[QueueEntry] = []
            changes: list[pgcounts.Change] = []
            added: list[tuple[JobFacts, Sequence[Mapping[str, Any]]]] = []
            rows = iter(stored_as)
            for p in plan:
                if not isinstance(p, NewRow):
                    out.append(p)
                    continue
                got = next(rows)
                if got is None:  # another connection stored this key since it was looked up: that one is it
                    with db.cursor(row_factory=dict_row) as cur:
                        first = cur.execute("SELECT * FROM entries WHERE idempotency_key = %s",
                                            (p.entry.idempotency_key,)).fetchone()
                    out.append(self._entry(first))
                    continue
                e = replace(p.entry, id=got[0], job_prefix=got[1])
                if e.sweep:
                    changes.append((e.sweep, e.team, e.id, None, e.state))
                added.append((pgusage.facts(e), e.history))
                out.append(e)
            pgcounts.apply(db, changes)
            pgusage.record_added(db, added)
        return out

    def _check_quota(self, db: psycopg.Connection[tuple[Any, ...]], quota: TeamQuota, fresh: Sequence[NewRow],
                     bases: Mapping[str, str]) -> None:
        for team, (count, size) in adding(fresh, bases).items():
            row = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(octet_length(spec)), 0), COALESCE((SELECT SUM(octet_length(b.spec))"
                " FROM spec_bases b WHERE b.id IN (SELECT spec_base FROM entries WHERE team = %s AND state = ANY(%s)"
                " AND spec_base IS NOT NULL)), 0) FROM entries WHERE team = %s AND state = ANY(%s)",
                (team, _LIVE, team, _LIVE)).fetchone()
            held, entry_bytes, base_bytes = (int(v) for v in row) if row else (0, 0, 0)
            judge(quota, team, held, entry_bytes + base_bytes, count, size)

    def get(self, entry_id: str) -> QueueEntry:
        with self._lock, self._read() as db:
            return self._get(db, entry_id)

    def _get(self, db: psycopg.Connection[tuple[Any, ...]], entry_id: str, lock: bool = False) -> QueueEntry:
        with db.cursor(row_factory=dict_row) as cur:
            row = cur.execute("SELECT * FROM entries WHERE id = %s" + (" FOR UPDATE" if lock else ""),
                              (entry_id,)).fetchone()
        if row is None:
            raise UnknownEntry(f"no queue entry {entry_id!r}")
        return self._entry(row)

    def list(self, states: Iterable[EntryState] | None = None, sweep: str | None = None,
             limit: int | None = None, offset: int = 0, *, team: str | None = None,
             name_glob: str | None = None) -> builtins.list[QueueEntry]:
        sql, args = "SELECT * FROM entries WHERE TRUE", list[object]()
        for clause, value in ((" AND team = %s", team), (" AND sweep = %s", sweep),
                              (" AND state = ANY(%s)", None if states is None else [s.value for s in states]),
                              (" AND name ~ %s", None if name_glob is None else glob_regex(name_glob))):
            if value is not None:
                sql += clause
                args.append(value)
        sql += " ORDER BY seq LIMIT %s OFFSET %s"
        args.extend([limit, offset])
        with self._lock, self._read() as db, db.cursor(row_factory=dict_row) as cur:
            return [self._entry(r) for r in cur.execute(sql.encode(), args)]

    def transition(self, entry_id: str, to: EntryState, *, expect: Iterable[EntryState] | None = None,
                   stop: StopIntent | None = None, durable: bool = True, **fields: Any) -> QueueEntry:
        with self._lock, self._tx(durable) as db:
            moved = self._move(db, entry_id, to, expect, fields)
            if stop is not None:
                self._put_stop(db, stop)
        return moved

    def admit_many(self, admissions: Sequence[Admission], at: float) -> builtins.list[QueueEntry]:
        with self._lock, self._tx() as db:
            return [self._move(db, a.entry_id, EntryState.ADMITTED, (EntryState.QUEUED,),
                               {"admitted_at": at, "at": at, "reason": "", "placements": a.placements})
                    for a in admissions]

    def _move(self, db: psycopg.Connection[tuple[Any, ...]], entry_id: str, to: EntryState,
              expect: Iterable[EntryState] | None, fields: dict[str, Any]) -> QueueEntry:
        current = self._get(db, entry_id, lock=True)  # the row stays locked until the transaction ends
        if expect is not None and current.state not in tuple(expect):
            raise StaleTransition(f"{entry_id}: is {current.state.value}, expected "
                                  f"{'/'.join(s.value for s in expect)}")
        if to is current.state:
            if "placements" in fields and tuple(fields["placements"]) != current.placements:
                raise StaleTransition(f"{entry_id}: already {to.value} with another placement")
        elif to not in TRANSITIONS[current.state]:
            raise StaleTransition(f"{entry_id}: {current.state.value} -> {to.value} is not allowed")
        at = fields.pop("at", None)
        event = {"from": current.state.value, "to": to.value, "at": at, "reason": fields.get("reason", "")}
        moved = replace(current, state=to, history=(*current.history, event)[-20:], **fields)
        placements, history = dumps(list(moved.placements)), dumps(list(moved.history))
        done = db.execute(
            "UPDATE entries SET state=%s, attempts=%s, reason=%s, placements=%s, admitted_at=%s, finished_at=%s,"
            " history=%s, registered_at=%s, refusals=%s, held=%s, priority=%s, size = size - octet_length(history)"
            " - octet_length(placements) + %s WHERE id=%s AND state = ANY(%s)",
            (moved.state.value, moved.attempts, moved.reason, placements, moved.admitted_at, moved.finished_at,
             history, moved.registered_at, moved.refusals, int(moved.held), moved.priority,
             len(history.encode()) + len(placements.encode()), entry_id, [current.state.value]))
        if done.rowcount != 1:  # the row lock makes this unreachable; kept as the compare-and-set itself
            raise StaleTransition(f"{entry_id}: moved by another writer")
        if current.sweep:
            pgcounts.apply(db, [(current.sweep, current.team, entry_id, current.state, to)])
        pgusage.record_move(db, pgusage.facts(moved), at)
        return moved

    def cancel_queued(self, entry_ids: Sequence[str], at: float, reason: str) -> set[str]:
        queued, cancelled = EntryState.QUEUED.value, EntryState.CANCELLED.value
        event = {"from": queued, "to": cancelled, "at": at, "reason": reason}
        with self._lock, self._tx() as db:
            rows = db.execute("SELECT id, history, sweep, team FROM entries WHERE id = ANY(%s) AND state = %s"
                              " ORDER BY id FOR UPDATE", (list(entry_ids), queued)).fetchall()
            db.cursor().executemany(
                "UPDATE entries SET state=%s, finished_at=%s, reason=%s, history=%s, size = size -"
                " octet_length(history) + %s WHERE id=%s AND state=%s",
                [(cancelled, at, reason, h, len(h.encode()), r[0], queued)
                 for r in rows for h in [dumps([*json.loads(r[1]), event][-20:])]])
            pgusage.record_ended(db, [str(r[0]) for r in rows], cancelled, at)
            pgcounts.apply(db, [(r[2], r[3], r[0], EntryState.QUEUED, EntryState.CANCELLED) for r in rows if r[2]])
        return {str(r[0]) for r in rows}

    def mark_registered(self, entry_id: str, attempt: int, at: float) -> bool:
        with self._lock, self._tx(durable=False) as db:
            cur = db.execute("UPDATE entries SET registered_at=%s WHERE id=%s AND attempts=%s AND state = ANY(%s)",
                             (at, entry_id, attempt, [EntryState.ADMITTED.value, EntryState.RUNNING.value]))
            return cur.rowcount == 1

    def set_reasons(self, reasons: Mapping[str, str]) -> None:
        with self._lock, self._tx(durable=False) as db:
            db.cursor().executemany("UPDATE entries SET reason=%s WHERE id=%s AND state=%s",
                                    [(r, e, EntryState.QUEUED.value) for e, r in reasons.items()])

    def sweep_states(self, sweep: str, team: str | None = None) -> builtins.list[tuple[str, EntryState]]:
        sql, args = "SELECT id, state FROM entries WHERE sweep = %s", [sweep]
        if team is not None:
            sql, args = sql + " AND team = %s", [sweep, team]
        with self._lock, self._read() as db:
            rows = db.execute((sql + " ORDER BY seq").encode(), args).fetchall()
        return [(str(r[0]), EntryState(r[1])) for r in rows]

    def purge_finished(self, before: float) -> int:
        """Retention, a batch per transaction (as SQLite's) so that no replica waits for the whole of it."""
        removed = 0
        while True:
            with self._lock, self._tx() as db:
                n = pghistory.purge_before(db, before, PURGE_BATCH)
            removed += n
            if n < PURGE_BATCH:
                return removed

    def usage_report(self, by: str, since: float, until: float, now: float,
                     team: str | None = None) -> builtins.list[UsageTotals]:
        """GPU accounting over [since, until] from the compact usage record (store/pgusage.py)."""
        with self._lock, self._read() as db:
            return pgusage.report(db, by, since, until, now, team)

    def usage_intervals(self, since: float, until: float, now: float,
                        team: str | None = None) -> builtins.list[tuple[str, float, float, float]]:
        with self._lock, self._read() as db:
            return pgusage.intervals(db, since, until, now, team)

    def sweep_summaries(self, team: str | None = None) -> builtins.list[SweepSummary]:
        with self._lock, self._read() as db:
            return pghistory.sweep_summaries(db, team)

    def _entry(self, row: Mapping[str, Any] | None) -> QueueEntry:
        assert row is not None
        return entry_of(row, self._spec(row["spec_base"], row["spec"]))

    def _spec(self, base_id: str | None, text: str) -> Mapping[str, Any]:
        if not base_id:
            return cast(Mapping[str, Any], json.loads(text))
        base = self._bases.get(base_id)
        if base is None:
            row = self._db.execute("SELECT spec FROM spec_bases WHERE id = %s", (base_id,)).fetchone()
            base = json.loads(row[0]) if row is not None else {}
            if len(self._bases) >= 64:
                self._bases.pop(next(iter(self._bases)))
            self._bases[base_id] = base
        return cast(Mapping[str, Any], specdiff.apply(base, json.loads(text)))

    # ---- stop intents ------------------------------------------------------------------------
    def add_stop(self, stop: StopIntent) -> None:
        with self._lock, self._tx() as db:
            self._put_stop(db, stop)

    def _put_stop(self, db: psycopg.Connection[tuple[Any, ...]], stop: StopIntent) -> None:
        db.execute("INSERT INTO stops (job_id, namespace, reason, created_at, attempts, next_at) VALUES"
                   " (%s, %s, %s, %s, 0, %s) ON CONFLICT (job_id, namespace) DO NOTHING",
                   (stop.job_id, stop.namespace, stop.reason, stop.created_at, stop.next_at))

    def stops(self, due_by: float | None = None) -> builtins.list[StopIntent]:
        sql, args = "SELECT job_id, namespace, reason, created_at, attempts, next_at FROM stops", []
        if due_by is not None:
            sql, args = sql + " WHERE next_at <= %s", [due_by]
        with self._lock, self._read() as db:
            rows = db.execute((sql + ' ORDER BY next_at, job_id COLLATE "C"').encode(), args).fetchall()
        return [StopIntent(*r) for r in rows]

    def stop_done(self, job_id: str, namespace: str) -> None:
        with self._lock, self._tx(durable=False) as db:
            db.execute("DELETE FROM stops WHERE job_id=%s AND namespace=%s", (job_id, namespace))

    def stop_retry(self, job_id: str, namespace: str, next_at: float) -> None:
        with self._lock, self._tx(durable=False) as db:
            db.execute("UPDATE stops SET attempts = attempts + 1, next_at=%s WHERE job_id=%s AND namespace=%s",
                       (next_at, job_id, namespace))

    # ---- meta --------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._lock, self._read() as db:
            row = db.execute("SELECT value FROM kv WHERE key = %s", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._lock, self._tx() as db:
            db.execute("INSERT INTO kv (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET"
                       " value = excluded.value", (key, value))
