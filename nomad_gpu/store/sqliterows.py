"""An entry read back from its SQLite row: a sweep trial's spec rebuilt from its sweep's shared spec, and
the specs of entries in flight kept decoded.

Apart from the store's writes (:mod:`nomad_gpu.store.sqlite`) because it is the one place that knows how
a row becomes a `QueueEntry`, and the caches it keeps are bounded here, in one place: an entry is read
at every state move, while its spec never changes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, cast

from nomad_gpu.store import specdiff
from nomad_gpu.store.entries import EntryState, QueueEntry, entry_of

_ENDED = frozenset(s.value for s in EntryState if s.is_terminal())
_SPECS_CACHED = 4096
"""Decoded specs kept (the entries in flight at once in a burst; each is a few hundred bytes)."""


class EntryRows:
    """Decodes the rows of one connection (the store's, read under its lock)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.bases: dict[str, Mapping[str, Any]] = {}
        self.specs: dict[str, tuple[str, Mapping[str, Any]]] = {}
        """Specs of entries in flight, by entry, with the stored text they came from: an entry is read at
        every state move, and its spec (a sweep trial's: a copy of the sweep's with the difference applied)
        never changes. An entry that ends leaves it, so it holds the queue and the live entries, bounded."""

    def entry(self, r: sqlite3.Row) -> QueueEntry:
        """An entry as stored; a sweep trial's spec is its sweep's shared spec with the trial's difference."""
        text = r["spec"]
        cached = self.specs.get(r["id"])
        if cached is not None and cached[0] == text:
            return entry_of(r, cached[1])
        spec = self._decode_spec(r["spec_base"], text)
        if r["state"] not in _ENDED:
            if len(self.specs) >= _SPECS_CACHED:
                self.specs.pop(next(iter(self.specs)))
            self.specs[r["id"]] = (text, spec)
        return entry_of(r, spec)

    def _decode_spec(self, base_id: str | None, text: str) -> Mapping[str, Any]:
        if not base_id:
            return cast(Mapping[str, Any], json.loads(text))
        base = self.bases.get(base_id)
        if base is None:
            found = self._db.execute("SELECT spec FROM spec_bases WHERE id = ?", (base_id,)).fetchone()
            base = json.loads(found[0]) if found is not None else {}
            if len(self.bases) >= 64:  # a few sweeps at a time are read; keep memory bounded
                self.bases.pop(next(iter(self.bases)))
            self.bases[base_id] = base
        return cast(Mapping[str, Any], specdiff.apply(base, json.loads(text)))

