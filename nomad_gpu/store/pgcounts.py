"""Each sweep's trials counted by outcome in a table of the PostgreSQL store, written in the transaction
that adds or moves a trial: the counters of store/counts.py (what an `after:` on a sweep is decided on in
O(1)), kept where every replica writing to the database sees the same ones.

Each transaction's changes are applied with `SweepCounts`, the same arithmetic as the SQLite store's, to
the rows read `FOR UPDATE` (two writers moving trials of one sweep take turns), in sweep order (no
deadlock between two such writers). After retention deleted trials their sweeps are counted afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from nomad_gpu.store.counts import BAD, SweepCount, SweepCounts
from nomad_gpu.store.entries import EntryState

Change = tuple[str, str, str, EntryState | None, EntryState]
"""(sweep, team, entry ID, old state or None for a trial added, new state)."""
Db = psycopg.Connection[tuple[Any, ...]]


def get(db: Db, sweep: str) -> SweepCount | None:
    row = db.execute("SELECT team, total, complete, bad, first_bad, first_bad_state FROM sweep_counts"
                     " WHERE sweep = %s", (sweep,)).fetchone()
    return None if row is None or not row[1] else _count(row)


def _count(row: Sequence[Any]) -> SweepCount:
    first = (str(row[4]), EntryState(row[5])) if row[4] is not None else None
    return SweepCount(row[0], total=int(row[1]), complete=int(row[2]), bad=int(row[3]), first_bad=first)


def apply(db: Db, changes: Sequence[Change]) -> None:
    """Apply a transaction's changes to the stored counters (inside that transaction)."""
    if not changes:
        return
    sweeps = sorted({c[0] for c in changes})
    # a row for each sweep first, so that the counters of a sweep new to the table are locked as well
    db.cursor().executemany("INSERT INTO sweep_counts (sweep, team, total, complete, bad) VALUES (%s, NULL, 0, 0, 0)"
                            " ON CONFLICT (sweep) DO NOTHING", [(s,) for s in sweeps])
    rows = db.execute("SELECT sweep, team, total, complete, bad, first_bad, first_bad_state FROM sweep_counts"
                      " WHERE sweep = ANY(%s) ORDER BY sweep FOR UPDATE", (sweeps,)).fetchall()
    counts = SweepCounts({r[0]: _count(r[1:]) for r in rows if r[2]})
    for sweep, team, entry_id, old, new in changes:
        if old is None:
            counts.added(sweep, team, entry_id, new)
        else:
            counts.moved(sweep, entry_id, old, new)
    _store(db, {s: counts.get(s) for s in sweeps})


def recount(db: Db, sweeps: Iterable[str]) -> None:
    """Count ``sweeps`` afresh from their stored trials (after retention deleted some)."""
    names = sorted(set(sweeps))
    if not names:
        return
    counts: dict[str, SweepCount | None] = dict.fromkeys(names)
    for sweep, team, state, n in db.execute(
            "SELECT sweep, team, state, COUNT(*) FROM entries WHERE sweep = ANY(%s) GROUP BY sweep, team, state"
            " ORDER BY sweep, team, state", (names,)):
        count = counts[sweep] or SweepCount(team)
        st = EntryState(state)
        counts[sweep] = SweepCount(count.team if count.team == team else None, total=count.total + n,
                                   complete=count.complete + n * (st is EntryState.COMPLETE),
                                   bad=count.bad + n * (st in BAD))
    for sweep, entry_id, state in db.execute(
            "SELECT DISTINCT ON (sweep) sweep, id, state FROM entries WHERE sweep = ANY(%s) AND state = ANY(%s)"
            ' ORDER BY sweep, length(id), id COLLATE "C"', (names, sorted(s.value for s in BAD))):
        found = counts[sweep]
        if found is not None:
            counts[sweep] = SweepCount(found.team, found.total, found.complete, found.bad,
                                       (str(entry_id), EntryState(state)))
    _store(db, counts)


def _store(db: Db, counts: dict[str, SweepCount | None]) -> None:
    gone = [s for s, c in counts.items() if c is None or not c.total]
    if gone:
        db.execute("DELETE FROM sweep_counts WHERE sweep = ANY(%s)", (gone,))
    db.cursor().executemany(
        "INSERT INTO sweep_counts (sweep, team, total, complete, bad, first_bad, first_bad_state)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (sweep) DO UPDATE SET team = excluded.team,"
        " total = excluded.total, complete = excluded.complete, bad = excluded.bad,"
        " first_bad = excluded.first_bad, first_bad_state = excluded.first_bad_state",
        [(s, c.team, c.total, c.complete, c.bad, c.first_bad[0] if c.first_bad else None,
          c.first_bad[1].value if c.first_bad else None) for s, c in counts.items() if c is not None and c.total])
