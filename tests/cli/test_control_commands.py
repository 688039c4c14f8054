"""hold, release, requeue, update, cancel (of a sweep), status ID, sweep status and logs, through the
CLI against the real API served on loopback (Nomad's side answered by a fake)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from click.testing import CliRunner

from nomad_gpu.api.payloads import Entry
from nomad_gpu.cli.api_client import ApiClient
from nomad_gpu.cli.control import follow_logs
from nomad_gpu.cli.entryview import progress, progress_bar, status_lines, trial_params
from nomad_gpu.cli.main import main
from nomad_gpu.service.config.settings import SchedulingSettings
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.http.listen import ApiServer, plan_listen
from nomad_gpu.service.loops.scheduler import SchedulerService
from nomad_gpu.store import EntryState, SqliteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from test_entry_routes import SPEC, SWEEP, FakeNomad, NoActuator, alloc, run  # noqa: E402

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


@pytest.fixture
def served() -> Iterator[tuple[SchedulerService, FakeNomad, str]]:
    service = SchedulerService(SqliteStore(), NoActuator(), SchedulingSettings())
    nomad = FakeNomad()
    server = ApiServer(create_app(service, nomad=nomad, nomad_address="http://nomad.test:4646"),
                       plan_listen("http://127.0.0.1:0", token_required=False))
    server.bind()
    address = server.serve()
    yield service, nomad, address
    server.stop()
    service.stop()


def cli(address: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env={"NOMAD_GPU_ADDR": address, "NOMAD_GPU_TOKEN": ""})
    return result.exit_code, result.stdout, result.stderr


def submit(service: SchedulerService, name: str = "job") -> str:
    return service.submit(yaml.safe_load(SPEC.format(name=name)))[0].id


def test_hold_release_update_and_their_refusals(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, _, address = served
    entry_id = submit(service)
    assert cli(address, "hold", entry_id) == (0, f"{entry_id}  queued  (held)\n", "")
    assert service.store.get(entry_id).held
    assert cli(address, "release", entry_id) == (0, f"{entry_id}  queued\n", "")
    code, out, _ = cli(address, "update", entry_id, "--priority", "90")
    assert code == 0 and "priority 90" in out and service.store.get(entry_id).priority == 90
    code, _, err = cli(address, "update", entry_id, "--priority", "500")
    assert code == 2 and "500" in err
    run(service, entry_id)
    code, out, err = cli(address, "hold", entry_id)
    assert code == 2 and err.startswith("error: ") and "running" in err and len(err.splitlines()) == 1
    code, _, err = cli(address, "requeue", "q999999")
    assert code == 2 and "q999999" in err


def test_requeue_json(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, _, address = served
    entry_id = submit(service)
    code, out, _ = cli(address, "requeue", entry_id, "--json")
    assert code == 0 and json.loads(out)["state"] == "queued"


def test_cancel_takes_a_sweep_id_too(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, _, address = served
    trials = service.submit(yaml.safe_load(SWEEP))
    sweep_id = str(trials[0].sweep)
    code, out, err = cli(address, "cancel", sweep_id)
    assert code == 0, err
    assert out == f"sweep {sweep_id}: 3 trials (3 cancelled)\n"
    assert {e.state for e in service.store.list(sweep=sweep_id)} == {EntryState.CANCELLED}
    code, _, err = cli(address, "cancel", "nothing-1")
    assert code == 2 and "no queue entry or sweep 'nothing-1'" in err


def test_status_shows_times_allocations_and_the_nomad_ui(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, nomad, address = served
    entry_id = submit(service)
    entry = service.store.get(entry_id)
    run(service, entry_id, at=entry.submitted_at + 65)
    nomad.allocs = [alloc("0f3c9a2e-aaaa-bbbb-cccc-000000000001")]
    code, out, err = cli(address, "status", entry_id)
    assert code == 0, err
    lines = dict(cast("tuple[str, str]", line.split(None, 1)) if " " in line else (line, "")
                 for line in out.splitlines())
    assert lines["state"].strip() == "running"
    assert lines["waited"].strip() == "1m" and lines["attempt"].strip() == "1 of 1"
    assert "0f3c9a2e-aaaa-bbbb-cccc-000000000001 running on gpu-01 (main[0])" in out
    assert f"http://nomad.test:4646/ui/jobs/{entry.nomad_job_id}@default" in out
    assert "UTC" in lines["started"] and lines["finished"].strip() == "-"
    as_json = json.loads(cli(address, "status", entry_id, "--json")[1])
    assert as_json["allocations"][0]["node_name"] == "gpu-01" and as_json["waited_s"] == pytest.approx(60.0)
    nomad.down = True
    code, out, _ = cli(address, "status", entry_id)
    assert code == 0 and "not read from Nomad" in out


def test_status_of_an_unregistered_entry_shows_no_nomad_link(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, _, address = served
    entry_id = submit(service)
    code, out, err = cli(address, "status", entry_id)
    assert code == 0, err
    assert "/ui/jobs/" not in out and "nomad ui" not in out
    assert "not registered with Nomad yet" in out
    assert "nomad_ui" not in json.loads(cli(address, "status", entry_id, "--json")[1])


def test_status_hcl_prints_what_nomad_stored(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, nomad, address = served
    entry_id = submit(service)
    code, _, err = cli(address, "status", entry_id, "--hcl")
    assert code == 2 and "never sent to Nomad" in err
    run(service, entry_id)
    nomad.sources = {0: 'job "ngpu-x" {\n  type = "batch"\n}\n'}
    assert cli(address, "status", entry_id, "--hcl") == (0, 'job "ngpu-x" {\n  type = "batch"\n}\n', "")
    code, _, err = cli(address, "status", "--hcl")
    assert code == 2 and "needs an entry ID" in err


def test_sweep_status_bar_and_trials(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, _, address = served
    trials = service.submit(yaml.safe_load(SWEEP))
    run(service, trials[0].id)
    service.cancel(trials[2].id)
    code, out, err = cli(address, "sweep", "status", str(trials[0].sweep))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"sweep {trials[0].sweep}: 3 trials"
    assert lines[1].startswith("[") and "1/3 ended: 0 done, 1 running, 1 queued, 0 failed, 1 cancelled" in lines[1]
    header = lines[3].split("\t")
    assert header == ["ID", "TRIAL", "STATE", "LR", "ATTEMPT", "TIME", "REASON"]
    rows = [line.split("\t") for line in lines[4:]]
    assert [(r[0], r[2], r[3]) for r in rows] == [(trials[0].id, "running", "0.1"), (trials[1].id, "queued", "0.01"),
                                                  (trials[2].id, "cancelled", "0.001")]
    assert rows[1][-1].startswith("not decided yet: ")  # no cycle ran here: every waiting trial says why
    code, _, err = cli(address, "sweep", "status", "nope-1")
    assert code == 2 and "nope-1" in err


def test_sweep_spec_file_still_launches(served: tuple[SchedulerService, FakeNomad, str], tmp_path: Any) -> None:
    service, _, address = served
    spec = tmp_path / "s.yaml"
    spec.write_text(SWEEP)
    code, out, err = cli(address, "sweep", str(spec), "--no-watch")
    assert code == 0, err
    assert out.startswith("sweep lr-") and "3 trials queued" in out
    code, out, _ = cli(address, "sweep", "--json", str(spec))
    assert code == 0 and len(json.loads(out)["entries"]) == 3


def test_logs_and_follow_until_the_allocation_ended(served: tuple[SchedulerService, FakeNomad, str]) -> None:
    service, nomad, address = served
    entry_id = submit(service)
    code, _, err = cli(address, "logs", entry_id)
    assert code == 2 and "queued" in err
    run(service, entry_id)
    nomad.allocs = [alloc("a1")]
    nomad.logs = {("a1", "main", "stdout"): b"hello\n", ("a1", "main", "stderr"): b"warn\n"}
    assert cli(address, "logs", entry_id) == (0, "hello\n", "")
    assert cli(address, "logs", entry_id, "--stderr") == (0, "warn\n", "")

    written: list[bytes] = []
    naps: list[float] = []

    def sleep(seconds: float) -> None:  # the task writes more, then ends, between two reads
        naps.append(seconds)
        if len(naps) == 1:
            nomad.logs[("a1", "main", "stdout")] += b"world\n"
        elif len(naps) == 2:
            nomad.allocs = [alloc("a1", "complete")]
            nomad.logs[("a1", "main", "stdout")] += b"bye\n"

    end = follow_logs(ApiClient(address), entry_id, "stdout", True, write=written.append, where={}, sleep=sleep)
    assert b"".join(written) == b"hello\nworld\nbye\n" and end == 16
    assert naps == [1.0, 1.0, 1.0], "one more read after the end, which came back empty"

    # following an entry whose task has not started yet waits for it; without -f that is an error
    nomad.logs = {}
    code, _, err = cli(address, "logs", entry_id)
    assert code == 2 and "not started yet" in err
    naps.clear()

    def start(seconds: float) -> None:
        naps.append(seconds)
        nomad.logs[("a1", "main", "stdout")] = b"late\n"

    written.clear()
    follow_logs(ApiClient(address), entry_id, "stdout", True, write=written.append, where={}, sleep=start)
    assert b"".join(written) == b"late\n" and naps[0] == 1.0


@pytest.mark.parametrize("args", [["hold"], ["release"], ["requeue"], ["update"], ["logs"], ["sweep"],
                                  ["sweep", "status"], ["sweep", "cancel"], ["sweep", "launch"]])
def test_every_new_command_has_help(args: list[str]) -> None:
    result = CliRunner().invoke(main, [*args, "--help"])
    assert result.exit_code == 0 and "Usage" in result.stdout


def test_status_lines_show_the_estimate_and_the_time_limit() -> None:
    entry = Entry(id="q1", state="running", submitted_at=0.0, attempts=1, max_retries=2, refusals=1,
                  spec={"runtime": 7200.0, "max_runtime": 14400.0})
    lines = dict(status_lines(entry, None, "Nomad is down", {}))
    assert lines["estimate"] == "2h00m" and lines["time limit"] == "4h00m"
    assert lines["attempt"] == ("2 of 3 (1 re-queued without using a retry: refused or preempted, or its "
                                "node cut off from Nomad)")
    assert lines["allocation"] == "(not read from Nomad: Nomad is down)"
    assert "position" not in lines  # running: no place in the queue


@pytest.mark.parametrize(("position", "shown"), [
    pytest.param(3, "3", id="considered"),
    pytest.param(None, "none: the scheduler does not consider it now (see reason)", id="held-or-throttled"),
])
def test_status_lines_show_a_queued_entrys_position(position: int | None, shown: str) -> None:
    entry = Entry(id="q1", state="queued", reason="sweep s-s1 at max_parallel 2: 2 running, 0 queued ahead",
                  position=position)
    assert dict(status_lines(entry, None, None, {}))["position"] == shown


def test_progress_and_params_helpers() -> None:
    counts = progress({"complete": 2, "running": 1, "queued": 1, "failed": 1, "cancelled": 0}, 5)
    assert counts == {"done": 2, "running": 1, "queued": 1, "failed": 1, "cancelled": 0, "total": 5}
    assert progress_bar(counts, width=10) == "[####xx>>..] 3/5 ended: 2 done, 1 running, 1 queued, 1 failed"
    assert trial_params(Entry(spec={"meta": {"nomad_gpu_trial": "3", "nomad_gpu_trial_lr": "0.1", "x": "y"}})) \
        == {"lr": "0.1"}
