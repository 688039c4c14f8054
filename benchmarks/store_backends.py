"""CPU per operation of the store contract's hot paths, SQLite against PostgreSQL, on one machine.

The paths the service takes for every job: `add` (one submission, team limits on), `transition` (queued
-> admitted with its placements -> running -> complete, each a durable compare-and-set) and `list` (the
queued entries, as the cycle and the API read them). For each store it prints the service process's CPU
(user + system) per operation and, for PostgreSQL, the database server's too (its processes' CPU, read
with psutil), with the wall time. Both stores are durable as the service runs them: SQLite with
`synchronous=FULL`, the throwaway PostgreSQL server with fsync on.

    python benchmarks/store_backends.py [--entries 500] [--postgres postgresql://user:pw@host/db]

Without `--postgres` it starts a throwaway server (tests/store/pg.py: initdb, a free loopback port) and
removes it after; with it, the server's CPU is not read (it may be another machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nomad_gpu.store import EntryState, QueueEntry, Store, open_store  # noqa: E402
from nomad_gpu.store.quota import TeamQuota  # noqa: E402

QUOTA = TeamQuota(max_entries=100_000, max_stored_bytes=1 << 30)
SPEC = {"name": "train", "image": "pytorch/pytorch:2.4", "command": "python train.py --epochs 3",
        "groups": [{"name": "main", "gpu": {"count": 1, "model": "A100"}, "cpu": 4000, "memory_mb": 16000}]}


def _server_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def measure(fn: Callable[[], None], ops: int, server_pid: int | None) -> dict[str, float]:
    """Client CPU, server CPU and wall time per operation, in microseconds."""
    c0, s0, w0 = time.process_time(), _server_cpu(server_pid), time.perf_counter()
    fn()
    c1, s1, w1 = time.process_time(), _server_cpu(server_pid), time.perf_counter()
    return {"client_cpu_us": round((c1 - c0) / ops * 1e6, 1), "server_cpu_us": round((s1 - s0) / ops * 1e6, 1),
            "wall_us": round((w1 - w0) / ops * 1e6, 1)}


def run(store: Store, n: int, server_pid: int | None) -> dict[str, dict[str, float]]:
    ids: list[str] = []

    def adds() -> None:
        for i in range(n):
            e = QueueEntry(id="", name=f"train-{i}", team=f"team-{i % 4}", priority=50, spec=SPEC, submitted_at=1.0)
            ids.append(store.add([e], QUOTA)[0].id)

    def lists() -> None:
        for _ in range(20):
            assert len(store.list([EntryState.QUEUED])) == n

    def transitions() -> None:
        for i, entry_id in enumerate(ids):
            store.transition(entry_id, EntryState.ADMITTED, expect=[EntryState.QUEUED], attempts=1, at=2.0,
                             placements=({"node_id": f"n{i % 50}", "group": "main", "device": "nvidia/gpu/A100",
                                          "instance_ids": [f"GPU-{i}"]},), admitted_at=2.0)
            store.transition(entry_id, EntryState.RUNNING, expect=[EntryState.ADMITTED], at=3.0, durable=False)
            store.transition(entry_id, EntryState.COMPLETE, expect=[EntryState.RUNNING], at=4.0, finished_at=4.0)

    out = {"add": measure(adds, n, server_pid)}
    out["list (per entry listed)"] = measure(lists, 20 * n, server_pid)
    out["transition"] = measure(transitions, 3 * n, server_pid)
    return out


@contextmanager
def postgres(dsn: str | None) -> Iterator[tuple[str, int | None]]:
    if dsn:
        yield dsn, None
        return
    from tests.store.pg import throwaway_server

    with throwaway_server(durable=True) as (server, data):
        pid = int((data / "postmaster.pid").read_text().split()[0])
        yield server.dsn(server.create_database()), pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--postgres", default=None, help="a DSN; default: a throwaway server of its own")
    args = parser.parse_args()
    report: dict[str, object] = {"entries": args.entries}
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "bench.db"))
        report["sqlite"] = run(store, args.entries, None)
        store.close()
    with postgres(args.postgres) as (dsn, pid):
        store = open_store(dsn)
        report["postgresql"] = run(store, args.entries, pid)
        store.close()
    sq, pg = report["sqlite"], report["postgresql"]
    assert isinstance(sq, dict) and isinstance(pg, dict)
    report["ratio_client_cpu"] = {op: round(pg[op]["client_cpu_us"] / sq[op]["client_cpu_us"], 2) for op in sq}
    report["ratio_client_plus_server_cpu"] = {
        op: round((pg[op]["client_cpu_us"] + pg[op]["server_cpu_us"]) / sq[op]["client_cpu_us"], 2) for op in sq}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
