"""`nomad-gpu keep ID [--for 2h]` against the real API on loopback: it prints until when the job is kept;
bad input is one line and exit 2, and nothing changes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nomad_gpu.cli.main import main
from nomad_gpu.service.accounting.idleaccounts import IdleAccounts
from nomad_gpu.service.accounting.metrics import Metrics
from nomad_gpu.service.config.idleconfig import idle_from_classes
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.reclaim import IdleReclaim
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from test_entry_routes import SPEC, NoActuator, run  # noqa: E402

pytestmark = pytest.mark.server  # starts a server: not in `make check`


@pytest.fixture
def served() -> Iterator[tuple[SchedulerService, IdleReclaim, str]]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    idle = IdleReclaim(service, idle_from_classes(None), IdleAccounts(lambda: None, lambda v: None, 0.0), Metrics(),
                       load=lambda: None, save=lambda v: None)
    server = ApiServer(create_app(service, idle=idle), plan_listen("http://127.0.0.1:0", token_required=False))
    server.bind()
    address = server.serve()
    yield service, idle, address
    server.stop()
    service.stop()


def cli(address: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env={"NOMAD_GPU_ADDR": address, "NOMAD_GPU_TOKEN": ""})
    return result.exit_code, result.stdout, result.stderr


def test_keep_and_its_refusals(served: tuple[SchedulerService, IdleReclaim, str]) -> None:
    service, idle, address = served
    spec = {**yaml.safe_load(SPEC.format(name="nb")), "class": "interactive"}
    (entry,) = service.submit(spec)
    code, _, err = cli(address, "keep", entry.id)
    assert code == 2 and "only a running job can be kept" in err and len(err.splitlines()) == 1
    run(service, entry.id)
    for args, words in [(["--for", "5h"], "past class interactive's max_keep of 4 h"),
                        (["--for", "soon"], "is not a duration"), (["--for", "0"], "is not a duration")]:
        code, _, err = cli(address, "keep", entry.id, *args)
        assert code == 2 and words in err and len(err.splitlines()) == 1, err
    code, _, err = cli(address, "keep", "q999999")
    assert code == 2 and "q999999" in err
    assert idle.keeps == {}
    code, out, _ = cli(address, "keep", entry.id, "--for", "2h")
    assert code == 0 and out.startswith(f"{entry.id}  kept until ") and out.endswith(" UTC\n")
    code, out, _ = cli(address, "keep", entry.id, "--json")
    assert code == 0 and json.loads(out)["id"] == entry.id and idle.keeps[entry.id] == json.loads(out)["kept_until"]


def test_status_shows_the_idle_clock_and_the_keep() -> None:
    from nomad_gpu.api.payloads import Entry, Usage
    from nomad_gpu.cli.entryview import status_lines

    note = "idle 25 min: will be stopped in 5 min if a job is waiting"
    lines = dict(status_lines(Entry(id="q1", state="running", usage=Usage(idle_note=note, kept_until=3600.0)),
                              None, None, {}))
    assert lines["idle"] == note and lines["kept"].startswith("until 1970-01-01 01:00:00 UTC")
    assert "idle" not in dict(status_lines(Entry(id="q1", state="running", usage=Usage()), None, None, {}))
