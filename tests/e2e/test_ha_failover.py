"""Two `serve` replicas, each its own process, on one throwaway PostgreSQL database, against the dev cluster
(DESIGN 18). Judged from the outside: each replica's `/v1/status`, and the dev cluster's audit, whose write
log names the process behind every write to Nomad.

- kill -9 the leader: its session ends with it; the standby takes over and admits what was submitted to it;
- SIGSTOP the leader past its lease: the standby ends the old session and takes over with a new epoch; the
  old one, resumed (SIGCONT), sends no write to Nomad, fences its records and exits 1;
- a database outage: every replica's API answers 503 with Retry-After; the leader admits nothing meanwhile,
  and once the database is back admits again.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from harness import CLUSTERS, overlaps, spec, wait_for

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.replicas import HEADERS, Replica, leader_of, write_config
from tests.store.pg import PgServer, pg_dsn, pg_server

pytestmark = pytest.mark.e2e
__all__ = ["pg_dsn", "pg_server"]
LEASE_S = 2.0


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    dc = DevCluster(CLUSTERS / "seed-a800.yaml", speed=10.0, heartbeat_s=1.0)
    dc.start()
    yield dc
    dc.stop()


@pytest.fixture
def pair(cluster: DevCluster, pg_dsn: str, tmp_path: Path) -> Iterator[list[Replica]]:
    config = write_config(tmp_path, LEASE_S)
    replicas = [Replica(name, pg_dsn, cluster.url, tmp_path) for name in ("a", "b")]
    replicas[0].start(config)
    leader_of(replicas, timeout_s=30)  # a first, so that the test knows which one leads
    replicas[1].start(config)
    wait_for(lambda: (replicas[1].status() or {}).get("leader") == replicas[0].addr, 30, "b standing by")
    yield replicas
    for r in replicas:
        r.kill()


def post(replica: Replica, text: str, key: str) -> dict[str, Any]:
    r = requests.post(f"{replica.addr}/v1/jobs", data=text.encode(), timeout=10,
                      headers={**HEADERS, "Idempotency-Key": key})
    assert r.status_code == 201, r.text
    return dict(r.json()["entries"][0])


def state_of(replica: Replica, entry_id: str) -> str:
    r = requests.get(f"{replica.addr}/v1/jobs/{entry_id}", headers=HEADERS, timeout=10)
    return str(r.json()["state"]) if r.status_code == 200 else ""


def writes_of(cluster: DevCluster, pid: int, since: float = 0.0) -> list[dict[str, Any]]:
    return [w for w in cluster.audit()["writes"] if f"pid {pid})" in w["agent"] and w["at"] >= since]


def test_a_killed_leader_is_replaced_and_the_standby_admits(cluster: DevCluster, pair: list[Replica]) -> None:
    a, b = pair
    status = b.status() or {}
    assert status["role"] == "standby" and status["leader"] == a.addr and status["epoch"] == 1
    first = post(b, spec("via-standby", duration_s=1.0), "k1")  # forwarded to the leader
    wait_for(lambda: state_of(b, first["id"]) == "complete", 30, "the first job complete")
    killed = time.monotonic()
    a.kill()
    second = post(b, spec("after-kill", duration_s=1.0), "k2") if leader_of([b], timeout_s=30) else {}
    wait_for(lambda: state_of(b, second["id"]) in ("running", "complete"), 30, "the second job admitted")
    took = time.monotonic() - killed
    status = b.status() or {}
    assert status["role"] == "leader" and status["epoch"] == 2 and status["leader"] == b.addr
    audit = cluster.audit()
    registers = [w for w in audit["writes"] if w["method"] in ("POST", "PUT")]
    assert [w["epoch"] for w in registers] == ["1", "2"], registers
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    print(f"killed leader -> the standby admitted in {took:.2f} s")  # noqa: T201 (the figure, for the log)
    metrics = requests.get(f"{b.addr}/metrics", timeout=10).text
    assert "nomad_gpu_leader 1.0" in metrics and "nomad_gpu_leader_changes_total 1.0" in metrics


def test_a_paused_leader_is_deposed_and_writes_nothing_when_it_resumes(cluster: DevCluster,
                                                                        pair: list[Replica]) -> None:
    a, b = pair
    # eight GPUs busy for a while and one entry waiting: what the old leader would admit when it wakes
    busy = [post(a, spec(f"busy-{i}", duration_s=30.0), f"busy-{i}") for i in range(8)]
    waiting = post(a, spec("waiting", duration_s=1.0), "waiting")
    wait_for(lambda: all(state_of(a, e["id"]) == "running" for e in busy), 30, "eight running")
    paused_at = time.time()
    a.signal(signal.SIGSTOP)
    new = leader_of([b], timeout_s=LEASE_S * 5)
    took = time.time() - paused_at
    assert new is b and (b.status() or {})["epoch"] == 2
    # not before a lease since the old leader's last renewal, sent at most lease/3 before the pause
    assert took >= LEASE_S * 2 / 3 - 0.1, f"took over after {took:.2f} s: before the old lease could have run out"
    # the busy jobs end under the new leader, which admits the waiting entry
    wait_for(lambda: state_of(b, waiting["id"]) in ("running", "complete"), 60, "the waiting entry admitted")
    resumed_at = time.time()
    a.signal(signal.SIGCONT)
    assert a.proc is not None and a.proc.wait(30) == 1  # deposed: fenced, and ended
    assert writes_of(cluster, a.pid, since=resumed_at) == []
    audit = cluster.audit()
    assert overlaps(audit) == 0 and audit["double_bookings_refused"] == 0
    waiting_registers = [w for w in audit["writes"] if waiting["nomad_job_id"] in w["path"] or (
        w["method"] in ("POST", "PUT") and w["epoch"] == "2")]
    assert waiting_registers and all(f"pid {b.pid})" in w["agent"] for w in waiting_registers)
    print(f"paused leader -> the standby took over in {took:.2f} s (lease {LEASE_S} s)")  # noqa: T201


def test_a_database_outage_is_503_and_the_leader_admits_again_after(cluster: DevCluster, pair: list[Replica],
                                                                     pg_server: PgServer, pg_dsn: str) -> None:
    a, b = pair
    dbname = pg_dsn.rsplit("/", 1)[1]
    with pg_server.admin() as admin:
        admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS false".encode())
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (dbname,))
    outage_at = time.time()
    try:
        for replica in (a, b):
            r = requests.post(f"{replica.addr}/v1/jobs", data=spec("in-outage").encode(), timeout=10,
                              headers=HEADERS)
            assert r.status_code == 503 and r.headers.get("Retry-After"), r.text
        time.sleep(LEASE_S * 1.5)  # past the lease: the leader may write nothing to Nomad now
        assert [w for w in cluster.audit()["writes"] if w["at"] >= outage_at] == []
    finally:
        with pg_server.admin() as admin:
            admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS true".encode())
    # the old leader takes its lease back, or the standby is first and the old one, deposed, ends
    leader = leader_of([a, b], timeout_s=30)
    entry = post(leader, spec("after-outage", duration_s=1.0), "after")
    wait_for(lambda: state_of(leader, entry["id"]) == "complete", 60, "admitted and complete after the outage")
    audit = cluster.audit()
    assert overlaps(audit) == 0
    names = [e["name"] for e in requests.get(f"{leader.addr}/v1/jobs", headers=HEADERS, timeout=10).json()["entries"]]
    assert names == ["after-outage"]  # nothing of the refused submissions stored


def test_a_paused_leaders_pending_stop_is_not_sent_after_it_resumes(cluster: DevCluster, pair: list[Replica]) -> None:
    """The write a deposed leader would most surely send: a stop it was retrying when it was paused. Its lease
    keeper needs a round trip or two to learn it was deposed; the check on its monotonic clock stops the
    write meanwhile."""
    a, b = pair
    job = post(a, spec("to-cancel", duration_s=600.0), "to-cancel")
    wait_for(lambda: state_of(a, job["id"]) == "running", 30, "running")
    cluster.state.faults.unreachable(60)  # the stop cannot reach Nomad: the leader retries it with backoff
    r = requests.delete(f"{a.addr}/v1/jobs/{job['id']}", headers=HEADERS, timeout=10)
    assert r.status_code == 200, r.text
    time.sleep(1.0)  # a few refused tries: the next retry is due within the pause
    a.signal(signal.SIGSTOP)
    wait_for(lambda: (b.status() or {}).get("role") == "leader", LEASE_S * 5, "b leading")
    cluster.state.faults.reachable()
    wait_for(lambda: not [x for x in cluster.audit()["allocations"] if x["job_id"] == job["nomad_job_id"]
                          and x["client_status"] == "running"], 60, "the job stopped by the new leader")
    resumed_at = time.time()
    a.signal(signal.SIGCONT)
    assert a.proc is not None and a.proc.wait(30) == 1
    assert writes_of(cluster, a.pid, since=resumed_at) == []
    stops = [w for w in cluster.audit()["writes"] if w["method"] == "DELETE"]
    assert stops and all(f"pid {b.pid})" in w["agent"] for w in stops), stops


def test_one_idempotency_key_sent_to_both_replicas_at_once_is_one_entry(pair: list[Replica]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    a, b = pair
    text = spec("twice", duration_s=0.5)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda r: post(r, text, "same-key"), [a, b] * 4))
    assert {e["id"] for e in answers} == {answers[0]["id"]}
    listed = requests.get(f"{b.addr}/v1/jobs", headers=HEADERS, timeout=10).json()["entries"]
    assert [e["name"] for e in listed] == ["twice"]
