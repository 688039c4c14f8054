"""A new database may adopt the jobs a lost one left running (issue 26, item 11): `serve
--adopt-existing-jobs` books each live job of this service as Nomad's own usage until it ends, stops
none of them, and never places a new entry onto their GPUs. Facts are read from the dev cluster's audit."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness import ONE_GPU, entries, overlaps, spec, start_service, submit, wait_for

from nomad_gpu.cli.main import main
from nomad_gpu.devcluster import DevCluster
from nomad_gpu.domain.errors import InvalidRequest
from nomad_gpu.nomad.connection import NomadSettings
from nomad_gpu.service.app import ServiceRuntime
from nomad_gpu.service.config.settings import ServiceSettings

pytestmark = pytest.mark.e2e


def _state(runtime: ServiceRuntime, entry_id: str) -> str:
    return str({e["id"]: e["state"] for e in entries(runtime)}[entry_id])


def test_an_adopted_job_keeps_its_gpu_until_it_ends(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with DevCluster(ONE_GPU, speed=1.0, heartbeat_s=1.0) as dc:
        old = start_service(dc.url, tmp_path / "lost.db")
        try:
            (first,) = submit(old, spec("left-running", duration_s=6.0))
            wait_for(lambda: _state(old, first["id"]) == "running", 20, "the old job running")
            job = {e["id"]: e for e in entries(old)}[first["id"]]["nomad_job_id"]
        finally:
            old.stop()
        settings = replace(old.settings, db_path=str(tmp_path / "new.db"), adopt_existing_jobs=True)
        fresh = ServiceRuntime(settings)
        with caplog.at_level(logging.INFO, logger="nomad_gpu.service.loops.existingjobs"):
            fresh.start(wait_ready_s=10)
        try:
            assert [r for r in caplog.records if "adopt" in r.getMessage() and job in r.getMessage()], \
                "one log line names the adopted job"
            (second,) = submit(fresh, spec("new-entry", duration_s=1.0))
            assert _state(fresh, second["id"]) == "queued"
            allocs = dc.audit()["allocations"]
            assert [a["job_id"] for a in allocs] == [job], "the new entry was placed beside the adopted job"
            assert allocs[0]["client_status"] == "running", "the adopted job was stopped"
            # the adopted job's end is observed: its GPU goes to the new entry, never both at once
            wait_for(lambda: _state(fresh, second["id"]) in ("running", "complete"), 30, "the new entry placed")
            audit = dc.audit()
            assert overlaps(audit) == 0
            by_job = {a["job_id"]: a for a in audit["allocations"]}
            assert by_job[job]["client_status"] == "complete", "the adopted job did not run to its end"
        finally:
            fresh.stop()


def test_adopting_and_ignoring_are_refused_together(tmp_path: Path) -> None:
    settings = replace(start_settings(tmp_path), ignore_existing_jobs=True, adopt_existing_jobs=True)
    runtime = ServiceRuntime(settings)
    with pytest.raises(InvalidRequest, match="--adopt-existing-jobs.*--ignore-existing-jobs"):
        runtime.start()
    runtime.stop()
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "cli.db"), "--adopt-existing-jobs",
                                       "--ignore-existing-jobs"])
    assert result.exit_code == 2, result.output
    assert "--adopt-existing-jobs" in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "cli.db").exists(), "the database was created before the flags were refused"


def start_settings(tmp_path: Path) -> ServiceSettings:
    return ServiceSettings(nomad=NomadSettings(address="http://127.0.0.1:9"), db_path=str(tmp_path / "both.db"),
                           listen="http://127.0.0.1:0")
