"""The whole service on the PostgreSQL store against the dev cluster: jobs submitted over HTTP are
admitted, run and complete, a sweep's counters follow its trials, and a restart on the same database
finds the queue as it was (its instance prefix too: no job of it is taken for an orphan)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from harness import entries, spec, start_service, submit, wait_for

from nomad_gpu.devcluster import DevCluster
from tests.store.pg import PgServer, pg_dsn, pg_server

pytestmark = pytest.mark.e2e
__all__ = ["pg_dsn", "pg_server"]  # the throwaway PostgreSQL server's fixtures (tests/store/pg.py)


def test_the_service_runs_its_queue_on_postgresql(seed: DevCluster, pg_dsn: str, tmp_path: Path) -> None:
    service = start_service(seed.url, pg_dsn)
    try:
        first = submit(service, spec("on-pg-a", duration_s=1.0)) + submit(service, spec("on-pg-b", duration_s=1.0))
        wait_for(lambda: {e["state"] for e in entries(service)} == {"complete"}, 60, "both complete")
        instances = {e["nomad_job_id"].split("-")[1] for e in entries(service)}  # ngpu-<instance>-q000001-1
    finally:
        service.stop()
    again = start_service(seed.url, pg_dsn)
    try:
        after = entries(again)
        assert [e["id"] for e in after] == [e["id"] for e in first]
        assert {e["state"] for e in after} == {"complete"}
        (third,) = submit(again, spec("on-pg-c", duration_s=0.5))
        assert third["id"] == "q000003" and {third["nomad_job_id"].split("-")[1]} == instances
        wait_for(lambda: {e["id"]: e["state"] for e in entries(again)}[third["id"]] == "complete", 60, "third done")
    finally:
        again.stop()


def test_a_database_outage_is_503_with_retry_after_and_the_service_carries_on(
        seed: DevCluster, pg_server: PgServer, pg_dsn: str) -> None:
    service = start_service(seed.url, pg_dsn)
    dbname = pg_dsn.rsplit("/", 1)[1]
    try:
        with pg_server.admin() as admin:  # the database goes away: no new session, the service's ended
            admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS false".encode())
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (dbname,))
        refused = requests.post(f"{service.address}/v1/jobs", data=spec("during-outage").encode(),
                                headers={"Content-Type": "application/yaml"}, timeout=10)
        assert refused.status_code == 503 and refused.headers.get("Retry-After"), refused.text
        with pg_server.admin() as admin:
            admin.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS true".encode())
        (entry,) = submit(service, spec("after-outage", duration_s=0.5))
        wait_for(lambda: {e["id"]: e["state"] for e in entries(service)}[entry["id"]] == "complete", 60, "done")
        assert [e["name"] for e in entries(service)] == ["after-outage"]  # nothing of the refused one stored
    finally:
        service.stop()
