"""The conveniences, end to end against the dev cluster and judged by its audit: `after:` runs a job only
after its dependency's allocation ended, a failed dependency means no allocation at all, `cancel` of
several IDs stops every one of their allocations, and `report` counts the GPU time the audit saw."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from harness import spec, start_service, submit, wait_for

from nomad_gpu.cli.main import main
from nomad_gpu.devcluster import DevCluster
from nomad_gpu.service.app import ServiceRuntime

pytestmark = pytest.mark.e2e


@pytest.fixture
def runtime(seed: DevCluster, tmp_path: Path) -> Iterator[ServiceRuntime]:
    rt = start_service(seed.url, tmp_path / "q.db")
    yield rt
    rt.stop()


def entry(rt: ServiceRuntime, entry_id: str) -> dict[str, object]:
    return dict(requests.get(f"{rt.address}/v1/jobs/{entry_id}", timeout=5).json())


def allocs(dc: DevCluster, job_id: object) -> list[dict[str, object]]:
    return [a for a in dc.audit()["allocations"] if a["job_id"] == job_id]


def cli(rt: ServiceRuntime, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env={"NOMAD_GPU_ADDR": rt.address, "NOMAD_GPU_TOKEN": ""})
    return result.exit_code, result.stdout, result.stderr


def test_after_starts_only_once_the_dependency_completed(seed: DevCluster, runtime: ServiceRuntime) -> None:
    (first,) = submit(runtime, spec("first", duration_s=20.0))
    (then,) = submit(runtime, spec("then", duration_s=2.0, extra=f"after: [{first['id']}]\n"))
    wait_for(lambda: entry(runtime, then["id"])["state"] == "complete", 60, "the dependent job to complete")
    (a,) = allocs(seed, entry(runtime, first["id"])["nomad_job_id"])
    (b,) = allocs(seed, entry(runtime, then["id"])["nomad_job_id"])
    assert a["finished_at"] is not None and b["started_at"] >= a["finished_at"]  # type: ignore[operator]


def test_a_failed_dependency_means_no_allocation(seed: DevCluster, runtime: ServiceRuntime) -> None:
    failing = spec("bad", duration_s=2.0).replace("dev: {duration_s: 2.0}", "dev: {duration_s: 2.0, fail: true}")
    (bad,) = submit(runtime, failing)
    (then,) = submit(runtime, spec("then", extra=f"after: [{bad['id']}]\n"))
    wait_for(lambda: entry(runtime, then["id"])["state"] == "dependency-failed", 60, "dependency-failed")
    assert entry(runtime, bad["id"])["state"] == "failed"
    assert str(entry(runtime, then["id"])["reason"]) == f"dependency {bad['id']} failed"
    assert allocs(seed, entry(runtime, then["id"])["nomad_job_id"]) == []
    assert all(j["job_id"] != entry(runtime, then["id"])["nomad_job_id"] for j in seed.audit()["jobs"])


def test_cancel_of_several_ids_stops_each_allocation(seed: DevCluster, runtime: ServiceRuntime) -> None:
    ids = [submit(runtime, spec(f"long-{i}", duration_s=3600.0))[0]["id"] for i in range(3)]
    wait_for(lambda: all(entry(runtime, i)["state"] == "running" for i in ids), 30, "three running entries")
    code, out, err = cli(runtime, "cancel", ids[0], ids[1], "--yes")
    assert code == 0, err
    assert out.splitlines() == [f"{ids[0]}  cancelled", f"{ids[1]}  cancelled"]

    def ended(i: str) -> bool:
        found = allocs(seed, entry(runtime, i)["nomad_job_id"])
        return bool(found) and all(a["finished_at"] is not None for a in found)

    wait_for(lambda: ended(ids[0]) and ended(ids[1]), 30, "both cancelled allocations to end")
    assert not ended(ids[2]) and entry(runtime, ids[2])["state"] == "running"
    code, out, _ = cli(runtime, "queue", "--json")
    assert [e["id"] for e in json.loads(out)] == [ids[2]]


def test_report_counts_the_gpu_time_the_audit_saw(seed: DevCluster, runtime: ServiceRuntime) -> None:
    (job,) = submit(runtime, spec("acct", gpus=2, duration_s=30.0))
    wait_for(lambda: entry(runtime, job["id"])["state"] == "complete", 60, "the job to complete")
    (a,) = allocs(seed, entry(runtime, job["id"])["nomad_job_id"])
    ran_h = (float(a["finished_at"]) - float(a["started_at"])) / 3600  # type: ignore[arg-type]
    code, out, _ = cli(runtime, "report", "--since", "1h", "--json")
    (row,) = json.loads(out)["rows"]
    assert row["key"] == "e2e" and row["jobs"] == 1 and row["attempts"] == 1
    # booked from admission to the end the service saw: at least the audit's run, at most a few seconds more
    assert 2 * ran_h <= row["gpu_hours"] <= 2 * ran_h + 2 * 10 / 3600
