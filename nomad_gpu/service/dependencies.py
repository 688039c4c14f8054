"""`after:` dependencies: an entry starts only once the entries and sweeps it names completed successfully.

Slurm's `--dependency=afterok:ID` in the queue's terms. At submission every named ID must be an entry or
a sweep of the submitting team (another team's is as unknown as one that does not exist). While the
queue runs, a queued entry with dependencies is held out of the cycle until all of them are `complete`
(a sweep: all its trials); its wait reason says what it waits for. If one of them ends any other way
(failed, cancelled, or dependency-failed itself), the entry ends `dependency-failed` without running:
a chain fails forward, one cycle per link. Reads are memoised per cycle, since many trials of a sweep
usually wait for the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nomad_gpu.domain.errors import InvalidRequest, UnknownEntry
from nomad_gpu.render import JobSpec, SweepSpec
from nomad_gpu.store import EntryState, QueueEntry
from nomad_gpu.store.sqlite import SqliteStore

ENTRY_ID = re.compile(r"q\d{6,}")
OK = (EntryState.COMPLETE,)


@dataclass(frozen=True)
class Verdict:
    """Where an entry's dependencies stand: all done (``ready``), one ended badly (``failed``), or waiting."""

    ready: bool
    failed: bool
    reason: str


def trials_of(store: SqliteStore, dep: str) -> list[QueueEntry]:
    """The entry ``dep`` names (an entry ID), or its sweep's trials; empty when there is none."""
    if ENTRY_ID.fullmatch(dep):
        try:
            return [store.get(dep)]
        except UnknownEntry:
            return []
    return store.list(None, sweep=dep)


def check_after(spec: JobSpec | SweepSpec, store: SqliteStore) -> None:
    """Every `after:` ID is an entry or sweep of the spec's team; InvalidRequest naming the first that is not."""
    for dep in spec.after:
        found = trials_of(store, dep)
        if not found or any(e.team != spec.team for e in found):
            raise InvalidRequest(f"after: no entry or sweep {dep!r} of team {spec.team!r}")


def _state_of(dep: str, trials: Sequence[QueueEntry]) -> tuple[str, str]:
    """('ok' | 'failed' | 'waiting', words) for one dependency."""
    if not trials:
        return "failed", f"{dep} is gone"
    bad = [t for t in trials if t.state.is_terminal() and t.state not in OK]
    if bad:
        return "failed", f"{dep} {'trial ' + bad[0].id + ' ' if len(trials) > 1 else ''}{bad[0].state.value}"
    left = [t for t in trials if t.state not in OK]
    if not left:
        return "ok", ""
    if len(trials) == 1:
        return "waiting", f"{dep} ({left[0].state.value}{', held' if left[0].held else ''})"
    return "waiting", f"sweep {dep} ({len(left)} of {len(trials)} trials not complete)"


class DependencyGate:
    """Asked once per cycle for each queued entry with `after:`; remembers each dependency's state for the
    cycle (``reset`` starts a new one)."""

    def __init__(self, read: Callable[[str], list[QueueEntry]]) -> None:
        self._read = read
        self._seen: dict[str, tuple[str, str]] = {}

    def reset(self) -> None:
        self._seen.clear()

    def verdict(self, after: Sequence[str]) -> Verdict:
        waiting: list[str] = []
        for dep in after:
            if dep not in self._seen:
                self._seen[dep] = _state_of(dep, self._read(dep))
            state, words = self._seen[dep]
            if state == "failed":
                return Verdict(False, True, f"dependency {words}")
            if state == "waiting":
                waiting.append(words)
        if waiting:
            return Verdict(False, False, "after: waiting for " + ", ".join(waiting))
        return Verdict(True, False, "")
