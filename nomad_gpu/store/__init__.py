"""Durable queue storage behind one contract (store/contract.py), built by `open_store` (DESIGN 3.6)."""

from nomad_gpu.store.contract import Store
from nomad_gpu.store.entries import TRANSITIONS, EntryState, QueueEntry
from nomad_gpu.store.factory import open_store
from nomad_gpu.store.sqlite import SqliteStore

__all__ = ["TRANSITIONS", "EntryState", "QueueEntry", "SqliteStore", "Store", "open_store"]
