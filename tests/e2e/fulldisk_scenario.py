"""The full-disk scenario of tests/e2e/test_full_disk_recovery.py, run inside a private mount namespace
whose queue directory is a 1 MiB tmpfs: a real filesystem that fills, where the write-ahead log takes
space like any file (SQLite's `max_page_count` bounds the database's pages only, never its log).

Usage: python fulldisk_scenario.py DIR (DIR: the small filesystem). Prints one JSON object of facts
(the audit's outcomes, the service's states, timings, the log's lines) for the test to judge.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests
from harness import dev_cluster, entries, spec, start_service, submit, wait_for

from nomad_gpu.service.loglimit import LOG_FORMAT

CHUNK = 4096
FREED = 300 * 1024
"""What is freed once the jobs have ended: 300 KB, as in issue 31's report."""


class Lines(logging.Handler):
    """Every record of the service's loggers, as the operator's log would show them."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage().split("\n", 1)[0]))


def fill(path: Path) -> int:
    """Write `path` until the filesystem says no; the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while True:
            written += os.write(fd, b"\0" * CHUNK)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return written


class Writer(threading.Thread):
    """Another team that keeps submitting and cancelling (each job waits on `after:`, so none runs): the
    service's own writes, which take whatever space is freed unless the log is checkpointed."""

    def __init__(self, address: str, after: str) -> None:
        super().__init__(daemon=True)
        self.address, self.after = address, after
        self.answers: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        pad = "x" * 2000
        text = (f"name: churn\nteam: e2e\ntask: {{image: busybox, env: {{PAD: '{pad}'}}}}\n"
                f"resources: {{cpu: 100, memory: 128}}\ngpu: {{count: 8}}\nafter: [{self.after}]\n")
        while not self.done.is_set():
            r = requests.post(f"{self.address}/v1/jobs", data=text.encode(), timeout=10,
                              headers={"Content-Type": "application/yaml"})
            self.answers[r.status_code] = self.answers.get(r.status_code, 0) + 1
            if r.status_code == 201:
                for e in r.json()["entries"]:
                    requests.delete(f"{self.address}/v1/jobs/{e['id']}", timeout=10,
                                    headers={"X-Nomad-Gpu-Client": "test"})
            # five a second: another team at work, not a flood. At fifty a second its 201s refill the 300 KB
            # freed in about 0.15 s, a race with the resync's own writes that a loaded machine loses
            self.done.wait(0.2)


def size(path: Path) -> int:
    return os.path.getsize(path) if path.exists() else 0


def main(root: Path) -> dict[str, Any]:
    lines = Lines()
    logging.getLogger("nomad_gpu").addHandler(lines)
    logging.getLogger("nomad_gpu").setLevel(logging.INFO)
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    db = root / "q.db"
    wal = root / "q.db-wal"
    dc = dev_cluster("seed-a800", speed=10.0)
    runtime = start_service(dc.url, db)
    facts: dict[str, Any] = {}
    try:
        ids = [submit(runtime, spec(f"full-{i}", duration_s=60.0))[0]["id"] for i in range(3)]
        wait_for(lambda: all(e["state"] == "running" for e in entries(runtime)), 30, "three jobs running")
        jobs = {e["id"]: e["nomad_job_id"] for e in entries(runtime)}
        writer = Writer(runtime.address, ids[0])
        writer.start()
        filler = root / "fill"
        facts["filled_bytes"] = fill(filler)
        full_at = time.monotonic()

        def ended_in_nomad() -> dict[str, str]:
            out = {}
            for a in dc.audit()["allocations"]:
                if a["job_id"] in jobs.values() and a["finished_at"] is not None:
                    out[a["job_id"]] = a["client_status"]
            return out

        wait_for(lambda: len(ended_in_nomad()) == 3, 60, "the jobs to end in Nomad while the disk is full")
        time.sleep(12.0)  # resyncs fail meanwhile; the service keeps writing what it can
        facts["states_while_full"] = {e["id"]: e["state"] for e in entries(runtime) if e["id"] in jobs}
        facts["wal_while_full"] = size(wal)
        with open(filler, "r+b") as fh:  # space returns
            fh.truncate(max(0, size(filler) - FREED))
        freed_at = time.monotonic()
        truth = {i: ended_in_nomad()[jobs[i]] for i in ids}
        facts["truth"] = truth
        reached: float | None = None
        deadline = freed_at + 30.0
        while time.monotonic() < deadline:
            if {e["id"]: e["state"] for e in entries(runtime) if e["id"] in jobs} == truth:
                reached = time.monotonic() - freed_at
                break
            time.sleep(0.1)
        facts["recovered_after_s"] = reached
        time.sleep(5.0)  # what the log and the log file do once recovered
        facts["states_after"] = {e["id"]: e["state"] for e in entries(runtime) if e["id"] in jobs}
        facts["wal_after"] = size(wal)
        facts["db_after"] = size(db)
        facts["full_for_s"] = freed_at - full_at
        facts["lines_while_full"] = [text for at, text in lines.lines if full_at <= at < freed_at]
        facts["lines_after"] = [text for at, text in lines.lines if at >= freed_at]
        writer.done.set()
        writer.join()
        facts["writer_answers"] = writer.answers
    finally:
        runtime.stop()
        dc.stop()
    return facts


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
