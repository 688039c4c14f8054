"""How much of its past one team keeps: its stored entries, live and finished, and their bytes are bounded,
and a submission that would pass either bound first deletes the team's oldest finished entries.

Finished entries did not count against any limit and were kept 30 days: ten rounds of submitting and
cancelling a 10,000-trial sweep grew the database to 50 MiB and the service to 297 MB (issue 31, item 4).
Counted on an index (`entries_team_size`), inside the transaction that stores the submission. Live
entries are never deleted (the live limits in store/quota.py bound them), nor the entries a queued entry
still waits for (``after:``), nor the newest row (its sequence keeps IDs from being reused). Their GPU
accounting stays (store/usage.py): `GET /v1/usage` answers the same after pruning as before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence

from nomad_gpu.store.entries import EntryState, dumps
from nomad_gpu.store.quota import NewRow, TeamQuota
from nomad_gpu.store.usage import fold

SLACK = 10
"""Pruning frees a further 1/SLACK of the bound, so it runs once per that many submissions, not on each."""
PURGE_BATCH = 2000
"""Entries past retention deleted per transaction."""
_ENDED = tuple(s.value for s in EntryState if s.is_terminal())


def new_sizes(fresh: Sequence[NewRow], bases: Mapping[str, str]) -> dict[int, int]:
    """Each new row's stored bytes (its spec, history and placements), by id(); a sweep's shared spec is
    counted on its first trial."""
    out: dict[int, int] = {}
    charged: set[str] = set()
    for p in fresh:
        size = len(p.stored.encode()) + len(dumps(list(p.entry.history))) + len(dumps(list(p.entry.placements)))
        if p.base_id and p.base_id not in charged:
            charged.add(p.base_id)
            size += len(bases[p.base_id].encode())
        out[id(p)] = size
    return out


def make_room(db: sqlite3.Connection, team: str, quota: TeamQuota, entries: int, size: int,
              keep: Callable[[], Collection[str]] | None = None) -> list[str]:
    """Delete ``team``'s oldest finished entries until ``entries`` more entries of ``size`` bytes fit its
    kept bounds; the IDs deleted. ``keep``: entry and sweep IDs that must stay (asked only when pruning)."""
    count, held = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries WHERE team = ?",
                             (team,)).fetchone()
    if count + entries <= quota.max_kept_entries and held + size <= quota.max_kept_bytes:
        return []
    free_entries = count + entries - quota.max_kept_entries * (SLACK - 1) // SLACK
    free_bytes = held + size - quota.max_kept_bytes * (SLACK - 1) // SLACK
    kept = set(keep()) if keep is not None else set()
    marks = ",".join("?" * len(_ENDED))
    rows = db.execute(
        f"SELECT seq, id, spec_base, size FROM entries WHERE team = ? AND state IN ({marks}) AND seq < (SELECT MAX(seq)"
        " FROM entries) ORDER BY COALESCE(finished_at, submitted_at), seq", (team, *_ENDED))
    doomed: list[tuple[int, str]] = []
    bases: set[str] = set()
    for seq, entry_id, base, row_size in rows:
        if free_entries <= 0 and free_bytes <= 0:
            break
        if entry_id in kept or (base and base in kept):  # a trial's shared spec is its sweep's ID
            continue
        doomed.append((seq, entry_id))
        if base:
            bases.add(base)
        free_entries -= 1
        free_bytes -= row_size
    rows.close()
    return _delete(db, doomed, bases)


def purge_before(db: sqlite3.Connection, before: float, limit: int) -> int:
    """Retention: up to ``limit`` entries that finished before ``before`` deleted (their accounting kept)."""
    marks = ",".join("?" * len(_ENDED))
    rows = db.execute(f"SELECT seq, id, spec_base FROM entries WHERE state IN ({marks}) AND finished_at < ? AND"
                      " seq < (SELECT MAX(seq) FROM entries) LIMIT ?", (*_ENDED, before, limit)).fetchall()
    return len(_delete(db, [(r[0], r[1]) for r in rows], {r[2] for r in rows if r[2]}))


def _delete(db: sqlite3.Connection, doomed: Sequence[tuple[int, str]], bases: Collection[str]) -> list[str]:
    ids = [entry_id for _, entry_id in doomed]
    fold(db, ids)
    for start in range(0, len(doomed), 500):
        chunk = [seq for seq, _ in doomed[start:start + 500]]
        db.execute(f"DELETE FROM entries WHERE seq IN ({','.join('?' * len(chunk))})", chunk)
    drop_unused_bases(db, bases)
    return ids


def drop_unused_bases(db: sqlite3.Connection, bases: Collection[str]) -> None:
    """Those of ``bases`` (sweeps' shared specs) that no entry refers to any more, found on the sweep index."""
    db.executemany("DELETE FROM spec_bases WHERE id = ? AND NOT EXISTS (SELECT 1 FROM entries WHERE sweep = ?"
                   " AND spec_base = ?)", [(b, b, b) for b in sorted(bases)])
