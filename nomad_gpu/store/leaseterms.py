"""The leader's lease in words both sides share, without the database driver: the service's lease keeper
(service/ha/leadership.py) is imported on SQLite too, where psycopg is never loaded."""

from __future__ import annotations

from dataclasses import dataclass


class LeaseLost(Exception):
    """Another replica holds the lease now (a higher epoch): this one was deposed."""


@dataclass(frozen=True)
class Holder:
    """What the lease row says: the current epoch and the leader's API address (empty: nobody yet)."""

    epoch: int
    address: str
