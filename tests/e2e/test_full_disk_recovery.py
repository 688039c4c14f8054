"""After a full disk the service recovers (issue 31, item 7). On a 1 MiB filesystem, once 300 KB were
freed, the write-ahead log grew back into it (SQLite checkpoints on its own only past 1,000 pages, 4 MB),
and for 90 s every resync failed "disk is full" while entries stayed `admitted` whose jobs had ended.

The filesystem is real: a 1 MiB tmpfs mounted in a private user and mount namespace (`unshare`, no root
needed where user namespaces are allowed), because SQLite's `max_page_count` (tests/service/
test_full_disk.py) bounds the database's pages only, never its log, which is what took the space. The
service and the dev cluster run in that namespace (fulldisk_scenario.py) and talk over loopback; three
jobs end in Nomad while another team keeps submitting and the disk is full; then 300 KB are freed, and
within one resync every entry must show what the dev cluster's audit says happened."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
ONE_RESYNC_S = 6.0
"""The watcher's longest wait between two resyncs after a failure (Backoff.max_s, 5 s), and a second."""


def _namespaces_work(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def test_entries_reach_their_true_state_within_one_resync_after_space_is_freed(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _namespaces_work(disk):
        pytest.skip("no user namespaces here to mount a small tmpfs without root")
    script = f"mount -t tmpfs -o size=1m tmpfs {disk} && exec {sys.executable} {HERE / 'fulldisk_scenario.py'} {disk}"
    run = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True, timeout=240,
                         check=False, cwd=HERE, env={**os.environ, "PYTHONPATH": f"{HERE.parents[1]}:{HERE}"})
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)
    assert set(facts["truth"].values()) == {"complete"}, facts  # the three ended in Nomad while it was full
    assert facts["writer_answers"].get("503"), facts  # the disk was full for the service too
    assert facts["recovered_after_s"] is not None, facts
    assert facts["recovered_after_s"] <= ONE_RESYNC_S, facts
    assert facts["states_after"] == facts["truth"], facts
    # a full disk is not a handler bug: no traceback per resync; the watcher says it once per episode (the
    # store says when its disk fills and when a write fits again: a checkpoint may make room by itself)
    lines = facts["lines_while_full"]
    assert not any("event handling failed" in line for line in lines), lines
    assert sum("cannot take in Nomad's state" in line for line in lines) <= 2, lines
    assert len(lines) <= 10, lines
