"""Which running jobs to preempt on one node so that a waiting job fits: the minimal victim set.

Pure and representation-free: the caller says what each candidate would free (in GPU-equivalents) and
gives `fits(victims)`, which answers whether the waiting job fits on the node once those victims' devices
are free. So whole GPUs, MIG instances and time-slice shares are judged by the same fit code the cycle
uses, and this module only chooses.

The order of preference between sets that fit, as Kueue's minimal preemption does it
(pkg/scheduler/preemption, `minimalPreemptions`: fewest, lowest priority, most recently started):
  1. the fewest GPU-equivalents freed (the least work stopped beyond the need),
  2. then the fewest victims,
  3. then the lowest highest-priority among the victims,
  4. then the latest earliest start (the least work lost),
  5. then the entry IDs, so equal inputs always give the same set.

Minimal: the set returned fits, and dropping any one victim makes it not fit. Sets are tried in the order
above, and every proper subset of a set comes before it (it frees no more and has fewer victims), so the
first set that fits is minimal. Past `EXHAUSTIVE_UP_TO` candidates the search is greedy (lowest priority,
latest start first, until it fits) and then pruned (each victim dropped again if the rest still fits),
which keeps the set minimal though perhaps not the cheapest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from nomad_gpu.domain.ids import EntryId

EXHAUSTIVE_UP_TO = 12
"""Candidates on one node past which every subset is not tried (2^12 sets at most)."""

MAX_FIT_CALLS = 512
"""Fit checks the exhaustive search may spend before it falls back to the greedy one."""


@dataclass(frozen=True)
class Candidate:
    """A running attempt the waiting job may preempt."""

    entry: EntryId
    gpus: float
    """GPU-equivalents its devices would free (a whole GPU 1, a share its fraction, a MIG slice its size)."""
    priority: int
    started_at: float
    preemptible: bool = True
    """Guards already applied by the caller; a False candidate is never chosen (a second line of defence)."""


Victims = tuple[Candidate, ...]


def minimal_victims(candidates: Iterable[Candidate], fits: Callable[[frozenset[EntryId]], bool], *,
                    need: float = 0.0) -> Victims | None:
    """The victim set to stop so the waiting job fits, or None when even all of them would not do.

    `need` is a lower bound on what must be freed (GPU-equivalents), so sets freeing less are not tried.
    An empty tuple means the job fits already."""
    pool = sorted((c for c in candidates if c.preemptible), key=lambda c: c.entry)
    if fits(frozenset()):
        return ()
    if not pool or not fits(frozenset(c.entry for c in pool)):
        return None
    if len(pool) <= EXHAUSTIVE_UP_TO:
        found = _exhaustive(pool, fits, need)
        if found is not None:
            return found
    return _greedy(pool, fits)


def preference(victims: Sequence[Candidate]) -> tuple[float, int, int, float, tuple[str, ...]]:
    """The sort key of a victim set: smaller is preferred (see the module's docstring)."""
    return (round(sum(c.gpus for c in victims), 6), len(victims),
            max((c.priority for c in victims), default=0),
            -min((c.started_at for c in victims), default=0.0),
            tuple(sorted(c.entry for c in victims)))


def _exhaustive(pool: Sequence[Candidate], fits: Callable[[frozenset[EntryId]], bool],
                need: float) -> Victims | None:
    sets = [s for n in range(1, len(pool) + 1) for s in combinations(pool, n)
            if sum(c.gpus for c in s) + 1e-9 >= need]
    sets.sort(key=preference)
    for calls, chosen in enumerate(sets):
        if calls >= MAX_FIT_CALLS:
            return None
        if fits(frozenset(c.entry for c in chosen)):
            return tuple(sorted(chosen, key=lambda c: c.entry))
    return None


def _greedy(pool: Sequence[Candidate], fits: Callable[[frozenset[EntryId]], bool]) -> Victims | None:
    order = sorted(pool, key=lambda c: (c.priority, -c.started_at, c.entry))
    chosen: list[Candidate] = []
    for c in order:
        chosen.append(c)
        if fits(frozenset(v.entry for v in chosen)):
            break
    else:
        return None
    for c in list(reversed(chosen)):  # prune: the last added were the most protected; try dropping them first
        rest = [v for v in chosen if v is not c]
        if rest and fits(frozenset(v.entry for v in rest)):
            chosen = rest
    return tuple(sorted(chosen, key=lambda c: c.entry))
