"""`make test` must pass the first time on a fresh machine: caches a library builds on first use (matplotlib's
font list, which it builds with a subprocess) must not be taken for a test's own server or subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.server
def test_the_plot_test_passes_with_empty_caches(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    env = dict(os.environ, MPLCONFIGDIR=str(tmp_path / "mpl"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               HOME=str(tmp_path / "home"))
    env.pop("NOMAD_GPU_SERVER_REPORT", None)
    (tmp_path / "home").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/sim/test_cli.py::test_packing_json_has_the_documented_fields"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
