"""A team's past on PostgreSQL: its kept entries bounded at submission and by retention, and its sweeps
counted in SQL, with the semantics of store/prune.py and store/sweeplist.py.

The same rules: live entries are never deleted, nor those ``keep`` names (what queued entries wait for),
nor the newest row (its sequence value keeps IDs from being reused); pruning frees a further 1/SLACK of a
bound so it runs once per that many submissions; the usage record of what is deleted is kept
(store/pgusage.py `fold`). Each sweep's counters (a table here, store/pgcounts.py) are counted afresh for
the sweeps that lost trials, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import psycopg

from nomad_gpu.store import pgcounts
from nomad_gpu.store.entries import EntryState
from nomad_gpu.store.pgusage import fold
from nomad_gpu.store.prune import SLACK
from nomad_gpu.store.quota import TeamQuota
from nomad_gpu.store.sweeplist import SweepSummary

Db = psycopg.Connection[tuple[Any, ...]]
_ENDED = [s.value for s in EntryState if s.is_terminal()]


def make_room(db: Db, team: str, quota: TeamQuota, entries: int, size: int,
              keep: Callable[[], Collection[str]] | None = None) -> list[str]:
    """Delete ``team``'s oldest finished entries until ``entries`` more of ``size`` bytes fit its kept bounds
    (called under the team's advisory lock); the IDs deleted."""
    row = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries WHERE team = %s", (team,)).fetchone()
    count, held = (int(row[0]), int(row[1])) if row else (0, 0)
    if count + entries <= quota.max_kept_entries and held + size <= quota.max_kept_bytes:
        return []
    free_entries = count + entries - quota.max_kept_entries * (SLACK - 1) // SLACK
    free_bytes = held + size - quota.max_kept_bytes * (SLACK - 1) // SLACK
    kept = set(keep()) if keep is not None else set()
    doomed: list[tuple[int, str, str | None]] = []
    with db.cursor(name="prune") as cur:  # read as far as needed, never the team's whole past at once
        cur.execute("SELECT seq, id, spec_base, size FROM entries WHERE team = %s AND state = ANY(%s) AND seq <"
                    " (SELECT MAX(seq) FROM entries) ORDER BY COALESCE(finished_at, submitted_at), seq",
                    (team, _ENDED))
        for seq, entry_id, base, row_size in cur:
            if free_entries <= 0 and free_bytes <= 0:
                break
            if entry_id in kept or (base and base in kept):  # a trial's shared spec is its sweep's ID
                continue
            doomed.append((seq, entry_id, base))
            free_entries -= 1
            free_bytes -= row_size
    return _delete(db, doomed)


def purge_before(db: Db, before: float, limit: int) -> int:
    """Retention: up to ``limit`` entries that finished before ``before`` deleted (their accounting kept)."""
    rows = db.execute("SELECT seq, id, spec_base FROM entries WHERE state = ANY(%s) AND finished_at < %s AND"
                      " seq < (SELECT MAX(seq) FROM entries) LIMIT %s FOR UPDATE",
                      (_ENDED, before, limit)).fetchall()
    return len(_delete(db, [(int(r[0]), str(r[1]), r[2]) for r in rows]))


def _delete(db: Db, doomed: Sequence[tuple[int, str, str | None]]) -> list[str]:
    if not doomed:
        return []
    ids = [entry_id for _, entry_id, _ in doomed]
    fold(db, ids)
    gone = db.execute("DELETE FROM entries WHERE seq = ANY(%s) RETURNING sweep",
                      ([seq for seq, _, _ in doomed],)).fetchall()
    db.cursor().executemany(
        "DELETE FROM spec_bases WHERE id = %s AND NOT EXISTS (SELECT 1 FROM entries WHERE sweep = %s AND"
        " spec_base = %s)", [(b, b, b) for b in sorted({base for _, _, base in doomed if base})])
    pgcounts.recount(db, {str(r[0]) for r in gone if r[0]})
    return ids


def sweep_summaries(db: Db, team: str | None = None) -> list[SweepSummary]:
    """The sweeps of ``team`` (every team's: None), counted on `entries_team_sweep`, in no particular order."""
    scope, args = ("team = %s AND ", (team,)) if team is not None else ("", ())
    states: dict[str, dict[str, int]] = {}
    submitted: dict[str, float] = {}
    for sweep, state, n, first_at in db.execute(
            f"SELECT sweep, state, COUNT(*), MIN(submitted_at) FROM entries WHERE {scope}sweep IS NOT NULL"
            " GROUP BY sweep, state".encode(), args):
        states.setdefault(sweep, {})[state] = int(n)
        submitted[sweep] = min(submitted.get(sweep, first_at), first_at)
    out = []
    for sweep, counts in states.items():
        first = db.execute(f"SELECT name, team FROM entries WHERE {scope}sweep = %s ORDER BY seq LIMIT 1".encode(),
                           (*args, sweep)).fetchone()
        assert first is not None
        out.append(SweepSummary(sweep, str(first[0]), str(first[1]), counts, float(submitted[sweep])))
    return out
