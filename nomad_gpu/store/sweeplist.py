"""Each sweep's trials counted by state, in SQL on an index, without reading a spec.

`GET /v1/sweeps` (which the dashboard polls) used to decode every team's entries and count them in
Python: another team's ten cancelled 10,000-trial sweeps made one team's list take 20.95 s (issue 31,
item 4). Here a team's sweeps are counted on `entries_team_sweep` (team, sweep, state, submitted_at),
and only each sweep's first trial is read, for its name.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class SweepSummary:
    id: str
    first_name: str
    """The first trial's name (`<sweep name>-t0`)."""
    team: str
    states: dict[str, int]
    submitted_at: float

    @property
    def trials(self) -> int:
        return sum(self.states.values())


def sweep_summaries(db: sqlite3.Connection, team: str | None = None) -> list[SweepSummary]:
    """The sweeps of ``team`` (every team's: None), in no particular order."""
    scope, args = ("team = ? AND ", (team,)) if team is not None else ("", ())
    states: dict[str, dict[str, int]] = {}
    submitted: dict[str, float] = {}
    for sweep, state, n, first_at in db.execute(
            f"SELECT sweep, state, COUNT(*), MIN(submitted_at) FROM entries WHERE {scope}sweep IS NOT NULL"
            " GROUP BY sweep, state", args):
        states.setdefault(sweep, {})[state] = int(n)
        submitted[sweep] = min(submitted.get(sweep, first_at), first_at)
    out = []
    for sweep, counts in states.items():
        first = db.execute(f"SELECT name, team FROM entries WHERE {scope}sweep = ? ORDER BY seq LIMIT 1",
                           (*args, sweep)).fetchone()
        out.append(SweepSummary(sweep, str(first[0]), str(first[1]), counts, float(submitted[sweep])))
    return out
