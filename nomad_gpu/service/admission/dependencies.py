"""`after:` dependencies: an entry starts only once the entries and sweeps it names completed successfully.

Slurm's `--dependency=afterok:ID` in the queue's terms. At submission every named ID must be an entry or
a sweep of the submitting team (another team's is as unknown as one that does not exist). While the
queue runs, a queued entry with dependencies is held out of the cycle until all of them are `complete`
(a sweep: all its trials); its wait reason says what it waits for. If one of them ends any other way
(failed, cancelled, or dependency-failed itself), the entry ends `dependency-failed` without running:
a chain fails forward, one cycle per link. A sweep is judged from its counters, kept by the store as
trials move (store/counts.py), never by reading its trials: 20 entries after a queued 10,000-trial sweep
made every cycle read all 10,000 (issue 31, item 8). Verdicts are memoised per cycle, since many entries
usually wait for the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from nomad_gpu.domain.errors import InvalidRequest, UnknownEntry
from nomad_gpu.render import JobSpec, SweepSpec
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.contract import Store

ENTRY_ID = re.compile(r"q\d{6,}")
OK = (EntryState.COMPLETE,)


@dataclass(frozen=True)
class Verdict:
    """Where an entry's dependencies stand: all done (``ready``), one ended badly (``failed``), or waiting."""

    ready: bool
    failed: bool
    reason: str


def team_of(store: Store, dep: str) -> str | None:
    """The team of the entry ``dep`` names (an entry ID), or of its sweep's trials; None when there is none."""
    if ENTRY_ID.fullmatch(dep):
        try:
            return store.get(dep).team
        except UnknownEntry:
            return None
    count = store.sweep_count(dep)
    return count.team if count is not None and count.total else None


def check_after(spec: JobSpec | SweepSpec, store: Store) -> None:
    """Every `after:` ID is an entry or sweep of the spec's team; InvalidRequest naming the first that is not."""
    for dep in spec.after:
        if team_of(store, dep) != spec.team:
            raise InvalidRequest(f"after: no entry or sweep {dep!r} of team {spec.team!r}")


def state_of(store: Store, dep: str) -> tuple[str, str]:
    """('ok' | 'failed' | 'waiting', words) for one dependency: an entry read by its ID, a sweep from its
    counters (store/counts.py), never by reading its trials; a sweep of one trial reads as that trial."""
    if ENTRY_ID.fullmatch(dep):
        try:
            return _entry_state(dep, store.get(dep))
        except UnknownEntry:
            return "failed", f"{dep} is gone"
    count = store.sweep_count(dep)
    if count is None or not count.total:
        return "failed", f"{dep} is gone"
    if count.total == 1:
        return _entry_state(dep, store.list(None, sweep=dep, limit=1)[0])
    if count.first_bad is not None:
        trial, state = count.first_bad
        return "failed", f"{dep} trial {trial} {state.value}"
    if not count.left:
        return "ok", ""
    return "waiting", f"sweep {dep} ({count.left} of {count.total} trials not complete)"


def _entry_state(dep: str, entry: QueueEntry) -> tuple[str, str]:
    if entry.state in OK:
        return "ok", ""
    if entry.state.is_terminal():
        return "failed", f"{dep} {entry.state.value}"
    return "waiting", f"{dep} ({entry.state.value}{', held' if entry.held else ''})"


class DependencyGate:
    """Asked once per cycle for each queued entry with `after:`; remembers each dependency's state for the
    cycle (``reset`` starts a new one)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._seen: dict[str, tuple[str, str]] = {}

    def reset(self) -> None:
        self._seen.clear()

    def verdict(self, after: Sequence[str]) -> Verdict:
        waiting: list[str] = []
        for dep in after:
            if dep not in self._seen:
                self._seen[dep] = state_of(self._store, dep)
            state, words = self._seen[dep]
            if state == "failed":
                return Verdict(False, True, f"dependency {words}")
            if state == "waiting":
                waiting.append(words)
        if waiting:
            return Verdict(False, False, "after: waiting for " + ", ".join(waiting))
        return Verdict(True, False, "")
