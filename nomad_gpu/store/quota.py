"""What one team may hold in the queue at once, checked inside the transaction that would store more
(so two submissions at once cannot both slip under the limit): live entries, and the bytes of their
stored specs (a sweep's shared spec counted once)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nomad_gpu.domain.errors import OverLimit
from nomad_gpu.store.entries import EntryState, QueueEntry


@dataclass(frozen=True)
class TeamQuota:
    """What one team may hold at once: live entries, and bytes of their stored specs; and what it may keep,
    live and finished (store/prune.py): entries, and their stored bytes."""

    max_entries: int
    max_stored_bytes: int
    max_kept_entries: int = 40_000
    max_kept_bytes: int = 128 << 20


@dataclass(frozen=True)
class NewRow:
    """An entry about to be stored, with its sweep's shared spec (if any) and its stored text."""

    entry: QueueEntry
    base_id: str | None
    stored: str


def adding(fresh: Sequence[NewRow], bases: Mapping[str, str]) -> dict[str, tuple[int, int]]:
    """Per team, the entries and stored bytes ``fresh`` adds (a sweep's shared spec counted once)."""
    out: dict[str, list[int]] = {}
    counted: set[str] = set()
    for p in fresh:
        n = out.setdefault(p.entry.team, [0, 0])
        n[0] += 1
        n[1] += len(p.stored.encode())
        if p.base_id and p.base_id not in counted:
            counted.add(p.base_id)
            n[1] += len(bases[p.base_id].encode())
    return {team: (n[0], n[1]) for team, n in out.items()}


def judge(quota: TeamQuota, team: str, held: int, held_bytes: int, count: int, size: int) -> None:
    """OverLimit when ``team``, holding ``held`` live entries of ``held_bytes``, may not add ``count`` of ``size``."""
    if held + count > quota.max_entries:
        raise OverLimit(f"team {team!r} holds {held} live entries; {count} more would pass its limit of "
                        f"{quota.max_entries} (api.team_limits.max_entries): wait for some to end, or cancel "
                        "some")
    if held_bytes + size > quota.max_stored_bytes:
        raise OverLimit(f"team {team!r} holds {held_bytes} bytes of live specs; {size} more would pass its "
                        f"limit of {quota.max_stored_bytes} (api.team_limits.max_stored_bytes): wait for some "
                        "to end, or cancel some")


def check_quota(db: sqlite3.Connection, quota: TeamQuota, fresh: Sequence[NewRow], bases: Mapping[str, str]) -> None:
    """OverLimit when a team's live entries or stored bytes, with ``fresh`` added, pass ``quota``."""
    live = [s.value for s in EntryState if not s.is_terminal()]
    marks = ",".join("?" * len(live))
    for team, (count, size) in adding(fresh, bases).items():
        held, held_bytes = db.execute(
            f"SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(spec AS BLOB))), 0) FROM entries WHERE team = ? AND state"
            f" IN ({marks})", (team, *live)).fetchone()
        held_bytes += db.execute(
            "SELECT COALESCE(SUM(LENGTH(CAST(spec AS BLOB))), 0) FROM spec_bases WHERE id IN (SELECT spec_base FROM"
            f" entries WHERE team = ? AND state IN ({marks}) AND spec_base IS NOT NULL)",
            (team, *live)).fetchone()[0]
        judge(quota, team, held, held_bytes, count, size)
