"""`queue` shows what waits and runs (history with --all) and filters; `cancel` takes several IDs or the same
filters, asks before several on a terminal, and reports what the token may not touch; `submit` of a sweep
names the sweep; `status` without an ID is a table for a person and JSON for a script."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nomad_gpu.api.payloads import Status
from nomad_gpu.cli import queuecmds
from nomad_gpu.cli.main import main
from nomad_gpu.cli.serviceview import service_rows
from nomad_gpu.service.config.settings import AccessSettings, SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import SqliteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from test_entry_routes import NoActuator  # noqa: E402

pytestmark = pytest.mark.server  # the API served on loopback


def spec(name: str, team: str = "vision") -> dict[str, object]:
    return yaml.safe_load(f"name: {name}\nteam: {team}\ntask: {{image: busybox}}\ngpu: {{count: 1}}\n")


@pytest.fixture
def served() -> Iterator[tuple[SchedulerService, str]]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    access = AccessSettings(tokens={"nlp-secret": "nlp"})
    server = ApiServer(create_app(service, ADMIN, access=access),
                       plan_listen("http://127.0.0.1:0", token_required=True))
    server.bind()
    yield service, server.serve()
    server.stop()
    service.stop()


ADMIN = "admin-secret"


def cli(address: str, *args: str, token: str = ADMIN, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin,
                                env={"NOMAD_GPU_ADDR": address, "NOMAD_GPU_TOKEN": token})
    return result.exit_code, result.stdout, result.stderr


def ids(out: str) -> list[str]:
    return [line.split("\t")[0] for line in out.strip().splitlines()[1:]]


def test_queue_shows_waiting_and_running_unless_all(served: tuple[SchedulerService, str]) -> None:
    service, address = served
    a, b = (service.submit(spec(n))[0].id for n in ("keep", "gone"))
    service.cancel(b)
    assert ids(cli(address, "queue")[1]) == [a]
    assert ids(cli(address, "queue", "--all")[1]) == [a, b]
    assert ids(cli(address, "queue", "--state", "cancelled")[1]) == [b]


def test_queue_filters_by_team_and_name_glob(served: tuple[SchedulerService, str]) -> None:
    service, address = served
    r1 = service.submit(spec("resnet-1"))[0].id
    service.submit(spec("bert-1", team="nlp"))
    r2 = service.submit(spec("resnet-2", team="nlp"))[0].id
    assert ids(cli(address, "queue", "--name", "resnet*")[1]) == [r1, r2]
    assert ids(cli(address, "queue", "--name", "resnet*", "--team", "nlp")[1]) == [r2]
    code, out, _ = cli(address, "queue", "--team", "nlp", "--json")
    assert code == 0 and {e["team"] for e in json.loads(out)} == {"nlp"}


def test_cancel_several_ids_at_once(served: tuple[SchedulerService, str]) -> None:
    service, address = served
    a, b, c = (service.submit(spec(f"j{i}"))[0].id for i in range(3))
    code, out, err = cli(address, "cancel", a, b)
    assert code == 0, err
    assert out.splitlines() == [f"{a}  cancelled", f"{b}  cancelled"]
    assert service.store.get(c).state.value == "queued"


def test_cancel_by_filter_asks_on_a_terminal_and_yes_skips_it(served: tuple[SchedulerService, str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    service, address = served
    mine = [service.submit(spec(f"resnet-{i}"))[0].id for i in range(2)]
    other = service.submit(spec("bert"))[0].id
    monkeypatch.setattr(queuecmds, "interactive", lambda: True)
    code, out, _ = cli(address, "cancel", "--name", "resnet*", stdin="n\n")
    assert code == 1 and "cancel 2 entries" in out
    assert all(service.store.get(i).state.value == "queued" for i in mine)
    code, out, _ = cli(address, "cancel", "--name", "resnet*", "--yes")
    assert code == 0 and sorted(out.split()[::2]) == sorted(mine)
    assert service.store.get(other).state.value == "queued"


def test_cancel_refuses_what_the_token_may_not_touch(served: tuple[SchedulerService, str]) -> None:
    service, address = served
    theirs = service.submit(spec("vision-job"))[0].id
    ours = service.submit(spec("nlp-job", team="nlp"))[0].id
    code, out, err = cli(address, "cancel", ours, theirs, "--yes", token="nlp-secret")
    assert code == 2
    assert out.splitlines() == [f"{ours}  cancelled"]
    assert f"{theirs}  refused: no queue entry or sweep {theirs!r}" in err
    assert service.store.get(theirs).state.value == "queued"
    code, out, _ = cli(address, "cancel", "--team", "vision", "--yes", token="nlp-secret")
    assert service.store.get(theirs).state.value == "queued"  # a filter never reaches past the token


def test_cancel_with_neither_ids_nor_filters_is_a_usage_error(served: tuple[SchedulerService, str]) -> None:
    _, address = served
    code, _, err = cli(address, "cancel")
    assert code == 2 and "name entries to cancel" in err


def test_submit_of_a_sweep_prints_its_id(served: tuple[SchedulerService, str], tmp_path: Path) -> None:
    _, address = served
    path = tmp_path / "sweep.yaml"
    path.write_text("kind: sweep\nname: lr\ntask: {image: b}\ngpu: {count: 1}\n"
                    "sweep: {parameters: {lr: [0.1, 0.01]}}\n")
    code, out, err = cli(address, "submit", str(path))
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("sweep lr-") and "2 trials queued" in first


def test_status_without_an_id_is_json_when_piped(served: tuple[SchedulerService, str]) -> None:
    _, address = served
    code, out, _ = cli(address, "status")
    assert code == 0 and json.loads(out)["ready"] is False


def test_status_rows_read_as_sentences() -> None:
    rows = dict(service_rows(Status(ready=True, queued=3, live=2, nodes=4, gpus=32, nomad_reachable=False,
                                    team_usage_gpu={"vision": 2.5}, nomad_address="http://nomad:4646")))
    assert rows["nomad"] == "http://nomad:4646 (NOT REACHABLE (admissions paused))"
    assert rows["queued"] == "3" and rows["admitted or running"] == "2" and rows["in use by vision"] == "2.50 GPU-eq"


def test_status_rows_name_the_replicas_role_on_postgresql() -> None:
    rows = dict(service_rows(Status(ready=True, role="standby", epoch=3, leader="http://10.0.0.5:4690")))
    assert rows["role"] == "standby (epoch 3)" and rows["leader"] == "http://10.0.0.5:4690"
    assert "role" not in dict(service_rows(Status(ready=True)))  # SQLite: one service, no epoch


def test_status_service_flag_shows_the_service(served: tuple[SchedulerService, str]) -> None:
    _, address = served
    code, out, _ = cli(address, "status", "--service", "--json")
    assert code == 0 and json.loads(out)["role"] == "leader" and json.loads(out)["epoch"] is None
