"""A throwaway PostgreSQL server for the tests of the PostgreSQL store: one per test session, a fresh
database per test.

`initdb` makes a cluster in a temporary directory and `pg_ctl` starts it on a free loopback port (no Unix
socket outside that directory), with a password (scram-sha-256) so that a wrong one can be tried, and
without fsync (a test never survives a power loss). PostgreSQL refuses to run as root: where the tests
run as root (CI's container), the cluster belongs to `nobody` and every server command runs through
`runuser`. Where no `initdb` is installed the tests that need it are skipped, saying so; `.ci/run`
installs Debian's `postgresql`, whose programs live in /usr/lib/postgresql/<version>/bin.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

PASSWORD = "test-secret"
_UNPRIVILEGED = "nobody"
_names = itertools.count()


@dataclass(frozen=True)
class PgServer:
    port: int
    password: str = PASSWORD

    def dsn(self, dbname: str = "postgres", password: str | None = None) -> str:
        return f"postgresql://postgres:{self.password if password is None else password}@127.0.0.1:{self.port}/{dbname}"

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.dsn(), autocommit=True)

    def create_database(self) -> str:
        name = f"t{os.getpid()}_{next(_names)}"
        with self.admin() as db:
            db.execute(f"CREATE DATABASE {name}".encode())
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as db:
            db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())


def bindir() -> Path | None:
    """Where PostgreSQL's server programs are: on the PATH, or Debian's newest /usr/lib/postgresql/<v>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4] or 0))
    return Path(debian[-1]).parent if debian else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NoServer(Exception):
    """PostgreSQL's server programs are not installed here."""


@contextlib.contextmanager
def throwaway_server(*, durable: bool = False) -> Iterator[tuple[PgServer, Path]]:
    """A new cluster on a free loopback port, removed on exit; with its data directory (where the
    postmaster's pid is). ``durable=False`` (tests): no fsync. NoServer when initdb is not installed."""
    bin_dir = bindir()
    if bin_dir is None:
        raise NoServer("PostgreSQL's initdb is not installed (Debian: apt-get install postgresql); .ci/run installs it")
    as_root = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="nomad-gpu-pg-", dir="/tmp" if as_root else None))
    run_as = ["runuser", "-u", _UNPRIVILEGED, "--"] if as_root else []
    (root / "pw").write_text(PASSWORD + "\n")
    if as_root:
        shutil.chown(root, _UNPRIVILEGED)
        shutil.chown(root / "pw", _UNPRIVILEGED)
    data, port = root / "data", _free_port()
    fast = "" if durable else " -c fsync=off -c full_page_writes=off -c synchronous_commit=off"
    try:
        subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=scram-sha-256",
                        f"--pwfile={root / 'pw'}", "-E", "UTF8", "--no-locale", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60",
                        "-o", f"-h 127.0.0.1 -p {port} -k {root}{fast}", "start"],
                       check=True, capture_output=True, timeout=90)
        yield PgServer(port), data
    except subprocess.CalledProcessError as exc:
        log = (root / "log").read_text(errors="replace")[-2000:] if (root / "log").exists() else ""
        raise NoServer(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')[-2000:]}{log}") from exc
    finally:
        _stop(data)
        shutil.rmtree(root, ignore_errors=True)


def restart(data: Path) -> None:
    """Restart a throwaway server as a crash would (an immediate shutdown, then a start with the options it
    ran with, `postmaster.opts`): every session ends, and what was committed is there again after recovery."""
    bin_dir = bindir()
    assert bin_dir is not None
    run_as = ["runuser", "-u", _UNPRIVILEGED, "--"] if os.geteuid() == 0 else []
    subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(data.parent / "log"), "-m",
                    "immediate", "-w", "-t", "60", "restart"], check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    if bindir() is None:
        pytest.skip("PostgreSQL's initdb is not installed (Debian: apt-get install postgresql); .ci/run installs it")
    with throwaway_server() as (server, _):
        yield server


def _stop(data: Path) -> None:
    """Stop the server by signal (an immediate shutdown, as `pg_ctl -m immediate` sends): a subprocess here
    would be counted against whichever test happens to end the session (tests/conftest.py)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.05)
    except ProcessLookupError:
        pass


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    """A new, empty database on the session's server, dropped after the test."""
    name = pg_server.create_database()
    yield pg_server.dsn(name)
    pg_server.drop_database(name)
