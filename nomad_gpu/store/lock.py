"""One service per database: an exclusive lock on a file beside it, held for the process's life.

Two services on one queue would both admit, and both register onto the same GPU (DESIGN 3.11). The
lock is an `flock` on `<db>.lock`: the kernel drops it when the process dies, even on SIGKILL, so a
crashed service never leaves a stale lock for a person to clean up.
"""

from __future__ import annotations

import fcntl
import os

from nomad_gpu.domain.errors import NomadGpuError


class StoreLocked(NomadGpuError):
    """Another process serves this database."""


class DatabaseLock:
    def __init__(self, db_path: str) -> None:
        self.path = f"{db_path}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreLocked(f"the queue database is in use by {holder} (lock {self.path}); "
                              "run one nomad-gpu service per database") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
