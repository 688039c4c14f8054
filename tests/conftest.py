"""Hypothesis profiles: `dev` (default) and `ci` (derandomized, so CI runs are reproducible); and the
check that every test starting a server is marked.

Pick one with `HYPOTHESIS_PROFILE=ci`. Neither has a deadline: property tests assert behaviour, never
speed (STYLE habit 7).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# ---- tests that start servers are marked -----------------------------------------------------------
# `make check` runs the unmarked tests only, so that a change in the core gets its answer in under a
# minute: a test that listens on a socket or starts a subprocess (in its own body or in a fixture it
# sets up, module-scoped ones included) must say so with `@pytest.mark.e2e` (the service against the
# dev cluster) or `@pytest.mark.server` (any other server or subprocess).
SERVER_MARKS = ("e2e", "server", "gpu")
_started: list[str] = []
_listen = socket.socket.listen
_popen = subprocess.Popen.__init__


def _listening(sock: socket.socket, *args: Any) -> None:
    _started.append("listens on a socket")
    _listen(sock, *args)


def _spawning(proc: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    _started.append("starts a subprocess")
    _popen(proc, *args, **kwargs)


socket.socket.listen = _listening  # type: ignore[method-assign, assignment]
subprocess.Popen.__init__ = _spawning  # type: ignore[method-assign, assignment]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build the caches a library builds on first use before any test runs, so that the subprocess
    matplotlib starts to list the system's fonts on a fresh machine is not taken for a test's own."""
    try:
        import matplotlib.font_manager  # noqa: F401  (loading it builds or reads the font cache)
    except ImportError:  # matplotlib is the optional `plot` extra
        pass
    _started.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _started.clear()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield
    started, marked = list(_started), any(item.get_closest_marker(mark) for mark in SERVER_MARKS)
    _started.clear()
    if started and not marked:
        report = os.environ.get("NOMAD_GPU_SERVER_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as out:
                out.write(f"{item.nodeid}\t{started[0]}\n")
        else:
            pytest.fail(f"{item.nodeid} {started[0]}: mark it @pytest.mark.server (or e2e) so that `make check` "
                        "leaves it out", pytrace=False)
    return result
