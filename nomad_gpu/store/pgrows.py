"""Rows of the PostgreSQL store: its tables read and written whole for `nomad-gpu store copy`
(store/transfer.py), column for column with the SQLite file's (an entry is decoded from its row by
`entries.entry_of`, the same for both stores).

What differs between the two is put right here: SQLite keeps the last sweep number in `kv` under
`sweep_seq` and the last entry number in its AUTOINCREMENT, PostgreSQL in two SEQUENCEs; sweep counters
are a table here and are counted afresh from the trials copied.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from nomad_gpu.store import pgcounts

TABLES = ("kv", "spec_bases", "entries", "stops", "usage_jobs", "usage_attempts")
"""What a copy moves, in this order (a table's column names are the same in both stores; GPU accounting's
record, store/usage.py, keeps its row IDs, which its attempts refer to)."""
KEPT = ("entries", "spec_bases", "stops", "usage_jobs")
"""Tables whose rows make a destination not empty."""
SWEEP_SEQ = "sweep_seq"



class Transfer:
    """`dump` and `load` of the PostgreSQL store (mixed into it)."""

    _db: psycopg.Connection[tuple[Any, ...]]
    location: str

    def holds_data(self) -> bool:
        """Whether anything but this database's instance prefix is stored (a copy refuses to write over it)."""
        db = self._db
        if any(db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in KEPT):
            return True
        row = db.execute("SELECT is_called FROM sweep_seq").fetchone()
        return bool(row and row[0]) or db.execute("SELECT 1 FROM kv WHERE key <> 'instance'").fetchone() is not None

    def dump(self) -> Iterator[tuple[str, list[str], list[Sequence[Any]]]]:
        """Each table of `TABLES`: its name, columns and rows (entries in submission order)."""
        for table in TABLES:
            cur = self._db.execute(f"SELECT * FROM {table}" + (" ORDER BY seq" if table == "entries" else ""))
            columns = [c.name for c in cur.description or ()]
            rows: list[Sequence[Any]] = list(cur.fetchall())
            if table == "kv":
                last = self._db.execute("SELECT last_value, is_called FROM sweep_seq").fetchone()
                if last is not None and last[1]:
                    rows.append((SWEEP_SEQ, str(last[0])))
            yield table, columns, rows

    def load(self, tables: Iterator[tuple[str, list[str], list[Sequence[Any]]]]) -> None:
        """Write every row of ``tables`` in one transaction, then set the sequences past what was copied."""
        db = self._db
        with db.transaction():
            for table, columns, rows in tables:
                if table == "kv":
                    last = [int(v) for k, v in rows if k == SWEEP_SEQ]
                    db.execute("SELECT setval('sweep_seq', %s, %s)", (last[0] if last else 1, bool(last)))
                    rows = [r for r in rows if r[0] != SWEEP_SEQ]
                    db.execute("DELETE FROM kv WHERE key = ANY(%s)", ([r[0] for r in rows],))
                marks = ", ".join(["%s"] * len(columns))
                names = ", ".join(f'"{c}"' for c in columns)  # quoted: `user` is a reserved word here
                db.cursor().executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})".encode(), rows)
            db.execute("SELECT setval('entry_seq', COALESCE((SELECT MAX(seq) FROM entries), 1),"
                       " (SELECT MAX(seq) FROM entries) IS NOT NULL)")
            db.execute("SELECT setval(pg_get_serial_sequence('usage_jobs', 'id'), COALESCE((SELECT MAX(id) FROM"
                       " usage_jobs), 1), (SELECT MAX(id) FROM usage_jobs) IS NOT NULL)")
            pgcounts.recount(db, [str(r[0]) for r in db.execute("SELECT DISTINCT sweep FROM entries"
                                                                 " WHERE sweep IS NOT NULL")])
