"""Each sweep's trials counted by outcome, kept as the store writes: what an `after:` on a sweep is decided
on, in O(1) per dependent, where reading the trials cost every cycle a scan of the whole sweep (20 entries
after a queued 10,000-trial sweep: another team's admission 0.01 s -> 1.95 s, issue 31 item 8).

The store reports each committed change (a trial added, a trial moved from one state to another) and
rebuilds the counters from its rows at start-up and after retention deleted some; `recount` is the same
from entries in hand, the definition the counters are tested against.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, replace

from nomad_gpu.store.entries import EntryState, QueueEntry

BAD = frozenset(s for s in EntryState if s.is_terminal() and s is not EntryState.COMPLETE)
"""Ended without success: a sweep with one such trial never completes."""


def order(entry_id: str) -> tuple[int, str]:
    """Submission order from an ID (`q000123`, `q1234567`: a longer number is a later one)."""
    return len(entry_id), entry_id


@dataclass(frozen=True)
class SweepCount:
    team: str | None
    """The team of its trials (None: trials of several teams, which a sweep never has)."""
    total: int = 0
    complete: int = 0
    bad: int = 0
    first_bad: tuple[str, EntryState] | None = None
    """The earliest submitted trial that ended badly, and how: what a dependent's reason names."""

    @property
    def left(self) -> int:
        """Trials not complete (waiting, live, or ended badly)."""
        return self.total - self.complete

    def plus(self, entry_id: str, state: EntryState, sign: int = 1) -> SweepCount:
        """With one trial in ``state`` added (``sign`` -1: taken away; a bad one only as a recount does)."""
        count = replace(self, total=self.total + sign, complete=self.complete + sign * (state is EntryState.COMPLETE),
                        bad=self.bad + sign * (state in BAD))
        if sign > 0 and state in BAD and (self.first_bad is None or order(entry_id) < order(self.first_bad[0])):
            count = replace(count, first_bad=(entry_id, state))
        return count


class SweepCounts:
    """The counters of every sweep in the store (a few dozen bytes each)."""

    def __init__(self, counts: dict[str, SweepCount] | None = None) -> None:
        self._by: dict[str, SweepCount] = counts or {}

    def get(self, sweep: str) -> SweepCount | None:
        return self._by.get(sweep)

    def as_dict(self) -> dict[str, SweepCount]:
        return dict(self._by)

    def added(self, sweep: str, team: str, entry_id: str, state: EntryState) -> None:
        count = self._by.get(sweep) or SweepCount(team)
        if count.team != team:
            count = replace(count, team=None)
        self._by[sweep] = count.plus(entry_id, state)

    def moved(self, sweep: str, entry_id: str, old: EntryState, new: EntryState) -> None:
        """A trial moved; a terminal state is never left (TRANSITIONS), so the earliest bad one stays."""
        count = self._by.get(sweep)
        if count is not None and old is not new:
            self._by[sweep] = count.plus(entry_id, old, -1).plus(entry_id, new)


class CountedSweeps(SweepCounts):
    """The store's counters: a transaction's changes are held until it commits (a rolled-back one, such
    as a cycle's admissions that failed, changes nothing); the caller holds the store's lock."""

    def __init__(self, db: sqlite3.Connection) -> None:
        super().__init__(load_counts(db))
        self._db = db
        self._pending: list[tuple[str, str, str, EntryState | None, EntryState]] = []
        self._recount = False

    def begin(self) -> None:
        self._pending.clear()
        self._recount = False

    def change(self, sweep: str, team: str, entry_id: str, old: EntryState | None, new: EntryState) -> None:
        """A trial stored (``old`` None) or moved, in the open transaction."""
        self._pending.append((sweep, team, entry_id, old, new))

    def deleted(self) -> None:
        """Rows were deleted (retention): count afresh from the rows once the transaction commits."""
        self._recount = True

    def committed(self) -> None:
        if self._recount:
            self._by = load_counts(self._db)
        else:
            for sweep, team, entry_id, old, new in self._pending:
                if old is None:
                    self.added(sweep, team, entry_id, new)
                else:
                    self.moved(sweep, entry_id, old, new)
        self.begin()


def recount(entries: Iterable[QueueEntry]) -> dict[str, SweepCount]:
    """The counters of the sweeps among ``entries``, counted afresh."""
    counts = SweepCounts()
    for e in entries:
        if e.sweep:
            counts.added(e.sweep, e.team, e.id, e.state)
    return counts.as_dict()


def load_counts(db: sqlite3.Connection) -> dict[str, SweepCount]:
    """The counters from the stored rows, in two grouped reads (no spec is read): at start-up and after
    retention deleted finished trials."""
    counts: dict[str, SweepCount] = {}
    for sweep, team, state, n in db.execute("SELECT sweep, team, state, COUNT(*) FROM entries WHERE sweep IS NOT"
                                            " NULL GROUP BY sweep, team, state ORDER BY sweep, team, state"):
        count = counts.get(sweep) or SweepCount(team)
        st = EntryState(state)
        counts[sweep] = replace(count, team=count.team if count.team == team else None, total=count.total + n,
                                complete=count.complete + n * (st is EntryState.COMPLETE),
                                bad=count.bad + n * (st in BAD))
    bad = [s.value for s in sorted(BAD, key=lambda s: s.value)]
    # SQLite takes a bare column of a MIN() aggregate from the row that has the minimum; the key is `order`'s
    for sweep, entry_id, state, _ in db.execute(
            f"SELECT sweep, id, state, MIN(printf('%06d', length(id)) || id) FROM entries WHERE sweep IS NOT NULL"
            f" AND state IN ({','.join('?' * len(bad))}) GROUP BY sweep", bad):
        counts[sweep] = replace(counts[sweep], first_bad=(entry_id, EntryState(state)))
    return counts
