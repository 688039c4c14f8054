"""Durable queue storage behind a small interface (SQLite by default; DESIGN 3.6)."""

from nomad_gpu.store.entries import TRANSITIONS, EntryState, QueueEntry
from nomad_gpu.store.sqlite import SqliteStore, Store

__all__ = ["TRANSITIONS", "EntryState", "QueueEntry", "SqliteStore", "Store"]
