"""`sweep list` and `report` through the CLI against the real API (the numbers are the service's)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from test_queue_commands import cli, served  # noqa: F401  (a fixture)

from nomad_gpu.service.loops.scheduler import SchedulerService

pytestmark = pytest.mark.server  # the API served on loopback


def _sweep(name: str, team: str) -> dict[str, object]:
    return {"kind": "sweep", "name": name, "team": team, "task": {"image": "b"}, "gpu": {"count": 1},
            "sweep": {"parameters": {"lr": [0.1, 0.2]}}}


def test_sweep_list_shows_the_token_s_sweeps(served: tuple[SchedulerService, str]) -> None:  # noqa: F811
    service, address = served
    vision = service.submit(_sweep("lr", "vision"))[0].sweep
    nlp = service.submit(_sweep("bs", "nlp"))[0].sweep
    code, out, err = cli(address, "sweep", "list")
    assert code == 0, err
    assert [line.split("\t")[:5] for line in out.strip().splitlines()[1:]] == [
        [nlp, "bs", "nlp", "2", "queued=2"], [vision, "lr", "vision", "2", "queued=2"]]
    code, out, _ = cli(address, "sweep", "list", "--json", token="nlp-secret")
    assert [r["id"] for r in json.loads(out)] == [nlp]


def test_report_as_table_csv_and_json(served: tuple[SchedulerService, str]) -> None:  # noqa: F811
    service, address = served
    service.submit({"name": "j", "team": "vision", "task": {"image": "b"}, "gpu": {"count": 1}})
    code, out, err = cli(address, "report", "--since", "7d", "--csv")
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["team", "gpu_hours", "jobs", "attempts", "mean_wait_s", "p95_wait_s", "failures",
                       "idle_gpu_hours", "reclaims", "reclaimed_gpu_hours", "preemptions", "lost_gpu_hours"]
    assert rows[1] == ["vision", "0.0", "1", "0", "", "", "0", "0.0", "0", "0.0", "0", "0.0"]  # queued: nothing
    code, out, _ = cli(address, "report", "--by", "kind", "--json")
    assert json.loads(out)["by"] == "kind" and json.loads(out)["rows"][0]["key"] == "gpu"
    code, _, err = cli(address, "report", "--since", "someday")
    assert code == 2 and "since must be like 30d" in err
