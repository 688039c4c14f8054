"""`nomad-gpu backup FILE`: a consistent copy of the queue database, taken while the service runs.

The queue is one SQLite file in WAL mode (DESIGN 3.6). Copying that file with `cp` while the service
writes can tear a page or miss what still sits in the `-wal` file; SQLite's online backup API copies
the pages of one read snapshot instead. The source is opened read-only, and the whole copy is one step
(one read transaction): in WAL mode a reader never blocks the writer, and a stepwise copy would start
over each time the service commits. The service's own lock (`<db>.lock`) is not taken, so a backup
runs beside a serving process.

The copy is written to a temporary file beside FILE, checked with `PRAGMA quick_check`, flushed to
disk and only then renamed onto FILE: a crash or a full disk never leaves a half-written backup under
the name a person will restore from. The result is a self-contained database file (no `-wal`).
Restoring is a file copy with the service stopped (README, "Backup and restore").
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.store.factory import sqlite_path

logger = logging.getLogger(__name__)

__all__ = ["BackupResult", "backup_database"]


@dataclass(frozen=True)
class BackupResult:
    source: str
    path: str
    bytes: int
    pages: int
    schema_version: int
    seconds: float

    def to_json(self) -> dict[str, object]:
        return {"source": self.source, "path": self.path, "bytes": self.bytes, "pages": self.pages,
                "schema_version": self.schema_version, "seconds": self.seconds}


def _open_read_only(db_path: Path, timeout_s: float) -> sqlite3.Connection:
    if not db_path.is_file():
        raise InvalidRequest(f"{db_path}: no such queue database")
    uri = f"file:{urllib.parse.quote(str(db_path.resolve()))}?mode=ro"
    try:
        src = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None)
        src.execute("SELECT count(*) FROM sqlite_schema").fetchone()  # fails here on a file that is no database
    except sqlite3.DatabaseError as exc:
        raise InvalidRequest(f"{db_path}: cannot read it as a SQLite database ({exc})") from exc
    return src


def backup_database(db_path: str | Path, dest: str | Path, *, overwrite: bool = False,
                    timeout_s: float = 30.0) -> BackupResult:
    """Copy the database at ``db_path`` to ``dest`` (see the module docstring); InvalidRequest on bad input."""
    started = time.monotonic()
    source, target = Path(sqlite_path(str(db_path))), Path(dest)  # a path or sqlite:///path, as `serve --db`
    if target.exists() and not overwrite:
        raise InvalidRequest(f"{target}: already exists (pass --force to replace it)")
    if target.is_dir():
        raise InvalidRequest(f"{target}: is a directory")
    if target.exists() and target.resolve() == source.resolve():
        raise InvalidRequest(f"{target}: is the database itself")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidRequest(f"{parent}: no such directory")

    src = _open_read_only(source, timeout_s)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            pages, version = _copy(src, tmp, source)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    finally:
        src.close()
    _fsync_dir(parent)
    result = BackupResult(source=str(source), path=str(target), bytes=target.stat().st_size, pages=pages,
                          schema_version=version, seconds=round(time.monotonic() - started, 3))
    logger.info("backed up %s to %s (%d bytes, %d pages)", source, target, result.bytes, result.pages)
    return result


def _copy(src: sqlite3.Connection, tmp: Path, source: Path) -> tuple[int, int]:
    """Back ``src`` up into the empty file ``tmp``, check it and flush it: (pages, schema version)."""
    dst = sqlite3.connect(str(tmp), isolation_level=None)
    try:
        try:
            src.backup(dst, pages=-1)  # one step: one snapshot, never restarted by the service's commits
        except sqlite3.DatabaseError as exc:
            raise InvalidRequest(f"{source}: backup failed ({exc})") from exc
        dst.execute("PRAGMA journal_mode=DELETE")  # the copy is one plain file, no -wal beside it
        check = dst.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise InvalidRequest(f"{source}: the copy failed its integrity check ({check})")
        pages = int(dst.execute("PRAGMA page_count").fetchone()[0])
        version = int(dst.execute("PRAGMA user_version").fetchone()[0])
    finally:
        dst.close()
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    return pages, version


def _fsync_dir(path: Path) -> None:
    """Make the rename durable (POSIX); a platform without directory descriptors skips it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
