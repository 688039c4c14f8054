"""A sweep's trials share one stored spec: each trial keeps only what differs from it.

A sweep of 1,000 trials used to store 1,000 full copies of its spec (48 MB for a 50 KB spec). Trials
differ from one another only where their parameters were substituted, so the store keeps the first
trial's spec once and, per trial, the leaves that differ: `[[path, value], ...]` for values set and
`[path]` for keys removed; lists of the same length are compared item by item (a path step is then an
index), others replaced whole. Exact for any JSON, nulls included (unlike a JSON merge patch, where null
means "remove").
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nomad_gpu.store.entries import QueueEntry

Patch = list[list[Any]]


def diff(base: Any, other: Any, path: tuple[str | int, ...] = ()) -> Patch:
    """What turns `base` into `other`."""
    if isinstance(base, Mapping) and isinstance(other, Mapping):
        out: Patch = []
        for key in base.keys() - other.keys():
            out.append([[*path, key]])
        for key, value in other.items():
            if key not in base:
                out.append([[*path, key], value])
            elif base[key] != value:
                out.extend(diff(base[key], value, (*path, key)))
        return out
    if isinstance(base, list) and isinstance(other, list) and len(base) == len(other):
        out = []
        for i, (a, b) in enumerate(zip(base, other, strict=True)):
            if a != b:
                out.extend(diff(a, b, (*path, i)))
        return out
    return [] if base == other else [[list(path), other]]


def apply(base: Any, patch: Patch) -> Any:
    """`base` with `patch` applied (base is not changed)."""
    out = copy.deepcopy(base)
    for op in patch:
        path = op[0]
        if not path:
            out = copy.deepcopy(op[1]) if len(op) == 2 else None
            continue
        target = out
        for key in path[:-1]:
            target = target[key]
        if len(op) == 2:
            target[path[-1]] = copy.deepcopy(op[1])
        else:
            target.pop(path[-1], None)
    return out


def sweep_bases(entries: Sequence[QueueEntry]) -> dict[str, Mapping[str, Any]]:
    """The sweeps of a submission with more than one trial, each with its first trial's spec (their shared
    stored spec; each trial then keeps only its difference from it)."""
    counts: dict[str, int] = {}
    first: dict[str, Mapping[str, Any]] = {}
    for e in entries:
        if e.sweep and not e.id:
            counts[e.sweep] = counts.get(e.sweep, 0) + 1
            first.setdefault(e.sweep, e.spec)
    return {s: first[s] for s, n in counts.items() if n > 1}
