"""`nomad-gpu queue`: the request, the wait, node names; fitted on a terminal, tab-separated in a pipe."""

from __future__ import annotations

import io
import json
import re
import time
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from nomad_gpu.api.payloads import Entry, NodeView
from nomad_gpu.cli import connect
from nomad_gpu.cli import main as cli_main
from nomad_gpu.cli.output import table
from nomad_gpu.cli.queueview import QUEUE_COLUMNS, QUEUE_WIDE_COLUMNS, queue_row, request_of, short_model, waited

NODE = "0a27be9f-ddf5-5da1-b57c-30fe44f15a6b"
NOW = 1_000_000.0


def group(name: str = "main", count: int = 1, **device: Any) -> dict[str, Any]:
    return {"name": name, "count": count, "task": {"driver": "docker"}, "resources": {"cpu": 100, "memory": 300},
            "gpu": None, "mig": None, "share": None, **device}


def entry(id_: str = "q000001", state: str = "queued", groups: list[dict[str, Any]] | None = None,
          placements: list[dict[str, Any]] | None = None, reason: str = "", submitted: float = NOW - 754,
          admitted: float | None = None, finished: float | None = None) -> Entry:
    return Entry.from_json({"id": id_, "name": "resnet-train", "team": "vision", "priority": 50, "state": state,
            "submitted_at": submitted, "admitted_at": admitted, "finished_at": finished, "attempts": 1,
            "max_retries": 0, "reason": reason, "nomad_job_id": f"ngpu-ab12cd-{id_}-1",
            "placements": placements or [], "sweep": None, "namespace": "default",
            "spec": {"name": "resnet-train", "groups": groups or [group(gpu={"count": 2, "models": None})]}})


def placement(ids: list[str], device: str | None = "NVIDIA A100-SXM4-80GB", share: int = 0) -> dict[str, Any]:
    return {"group": "main", "index": 0, "node": NODE, "cpu_mhz": 100, "memory_mb": 300, "instance_ids": ids,
            "device_name": device, "share_milli": share, "gpu_equivalents": 1.0}


@pytest.mark.parametrize(("model", "short"), [
    pytest.param("NVIDIA A100-SXM4-80GB", "A100", id="a100"),
    pytest.param("NVIDIA H100 80GB HBM3", "H100", id="h100"),
    pytest.param("NVIDIA A800-SXM4-80GB", "A800", id="a800"),
    pytest.param("NVIDIA RTX 6000 Ada Generation", "RTX 6000", id="rtx"),
    pytest.param("Tesla V100-SXM2-16GB", "V100", id="tesla"),
])
def test_short_model(model: str, short: str) -> None:
    assert short_model(model) == short


@pytest.mark.parametrize(("e", "wide", "expected"), [
    pytest.param(entry(groups=[group(gpu={"count": 2, "models": ["NVIDIA A100-SXM4-80GB"]})]), False, "2 x A100",
                 id="gpu-model-asked"),
    pytest.param(entry(groups=[group(gpu={"count": 2, "models": None})]), False, "2 x GPU", id="gpu-any-model"),
    pytest.param(entry(groups=[group(gpu={"count": 1, "models": ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]})]),
                 False, "1 x A100/H100", id="gpu-either-model"),
    pytest.param(entry(state="running", groups=[group(gpu={"count": 2, "models": None})],
                       placements=[placement(["GPU-1", "GPU-2"])]), False, "2 x A100", id="gpu-placed-model"),
    pytest.param(entry(state="running", groups=[group(gpu={"count": 2, "models": None})],
                       placements=[placement(["GPU-1", "GPU-2"])]), True, "2 x NVIDIA A100-SXM4-80GB",
                 id="gpu-placed-model-wide"),
    pytest.param(entry(groups=[group(count=4, gpu={"count": 2, "models": None})]), False, "8 x GPU", id="gang"),
    pytest.param(entry(groups=[group(mig={"profile": "3g.40gb", "count": 1})]), False, "mig 3g.40gb", id="mig"),
    pytest.param(entry(groups=[group(mig={"profile": "1g.10gb", "count": 2})]), False, "2 x mig 1g.10gb",
                 id="mig-two"),
    pytest.param(entry(groups=[group(share={"milli": 250})]), False, "share 250m", id="share"),
    pytest.param(entry(groups=[group()]), False, "cpu only", id="no-gpu"),
    pytest.param(entry(groups=[group("ps"), group("worker", count=2, gpu={"count": 1, "models": None})]), False,
                 "2 x GPU", id="groups-without-gpu-skipped"),
    pytest.param(entry(groups=[group("a", share={"milli": 500}), group("b", mig={"profile": "3g.40gb", "count": 1})]),
                 False, "share 500m + mig 3g.40gb", id="two-groups"),
])
def test_request_column(e: Entry, wide: bool, expected: str) -> None:
    assert request_of(e, wide) == expected


@pytest.mark.parametrize(("e", "expected"), [
    pytest.param(entry(state="queued", submitted=NOW - 45), "45s", id="queued-seconds"),
    pytest.param(entry(state="queued", submitted=NOW - 754), "12m", id="queued-minutes"),
    pytest.param(entry(state="queued", submitted=NOW - 3 * 3600 - 5 * 60), "3h05m", id="queued-hours"),
    pytest.param(entry(state="queued", submitted=NOW - 2 * 86400 - 4 * 3600), "2d04h", id="queued-days"),
    pytest.param(entry(state="running", submitted=NOW - 3600, admitted=NOW - 3000), "10m", id="until-admitted"),
    pytest.param(entry(state="cancelled", submitted=NOW - 3600, finished=NOW - 3540), "1m", id="cancelled-waiting"),
    pytest.param(entry(state="queued", submitted=NOW + 5), "0s", id="clock-skew-never-negative"),
])
def test_waited_column(e: Entry, expected: str) -> None:
    assert waited(e, NOW) == expected


def test_where_names_the_node_and_wide_lists_the_ids() -> None:
    e = entry(state="running", placements=[placement(["GPU-aaa", "GPU-bbb"])])
    assert queue_row(e, {NODE: "gpu-a800-1"}, NOW)[-2] == "gpu-a800-1: 2 devices"
    assert queue_row(e, {}, NOW)[-2] == "0a27be9f: 2 devices"  # no inventory: the ID prefix stands in
    wide = queue_row(e, {NODE: "gpu-a800-1"}, NOW, wide=True)
    assert wide[-2] == "gpu-a800-1: GPU-aaa,GPU-bbb"
    assert len(wide) == len(QUEUE_WIDE_COLUMNS) and wide[-3] == "ngpu-ab12cd-q000001-1"
    shared = entry(state="running", groups=[group(share={"milli": 250})],
                   placements=[placement(["GPU-x-s0"], device=None, share=250)])
    assert queue_row(shared, {NODE: "n1"}, NOW)[-2] == "n1: 250 milli-GPU"


def test_a_waiting_entry_shows_its_reason() -> None:
    e = entry(reason="fragmented: 8 GPUs free in total, at most 3 on one node")
    assert queue_row(e, {}, NOW)[-2] == "fragmented: 8 GPUs free in total, at most 3 on one node"


def test_the_table_fits_a_narrow_terminal_without_splitting_a_number() -> None:
    rows = [queue_row(entry(f"q{i:06d}", reason="no node offers this shape: 8 x H100 with 900 GiB of memory each, "
                                                "and none is draining", submitted=NOW - 123_456), {}, NOW)
            for i in range(3)]
    buf = io.StringIO()
    table(None, QUEUE_COLUMNS, rows, out=Console(file=buf, width=100, force_terminal=True, color_system=None))
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    text = buf.getvalue()
    for i in range(3):
        assert f"q{i:06d}" in text  # IDs whole, on one line
    assert text.count("1d10h") == 3 and "2 x GPU" in text
    assert sum("none is draining" in line or "draining" in line for line in lines) >= 3  # the reason folded, kept


def test_piped_output_is_tab_separated_and_never_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    reason = "capacity reserved for an older job " * 5
    entries = [entry(reason=reason.strip()),
               entry("q000002", state="running", placements=[placement(["GPU-1"])], admitted=NOW - 100)]

    served = [{**e.to_json(), "eta": NOW + 600} if e.state == "queued" else e.to_json() for e in entries]

    class FakeClient:
        def jobs(self, state: str | None, sweep: str | None, eta: bool = False, *, team: str | None = None,
                 name_glob: str | None = None) -> list[Entry]:
            assert eta, "queue asks the service for ETAs"
            return [Entry.from_json(e) for e in served]

        def inventory(self) -> list[NodeView]:
            return [NodeView(id=NODE, name="gpu-a800-1")]

    monkeypatch.setattr(connect, "client", FakeClient)
    monkeypatch.setattr(time, "time", lambda: NOW)  # the module cli.main reads the clock from
    result = CliRunner().invoke(cli_main.main, ["queue"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # the columns scripts read keep their order; POS (the scheduler's order) is appended at the end
    assert lines[0].split("\t") == ["ID", "NAME", "TEAM", "PRIO", "STATE", "REQUEST", "WAITED", "ETA", "WHY / WHERE",
                                    "POS"]
    assert lines[0].split("\t") == [c.header for c in QUEUE_COLUMNS]
    assert lines[1].split("\t")[-2] == "gpu-a800-1: 1 device"  # by position: what runs comes first
    assert lines[2].split("\t") == ["q000001", "resnet-train", "vision", "50", "queued", "2 x GPU", "12m",
                                    "in 10m", reason.strip(), "-"]
    wide = CliRunner().invoke(cli_main.main, ["queue", "--wide"]).stdout.splitlines()
    assert wide[0].split("\t") == [c.header for c in QUEUE_WIDE_COLUMNS]
    assert wide[1].split("\t")[-2] == "gpu-a800-1: GPU-1"
    as_json = CliRunner().invoke(cli_main.main, ["queue", "--json"]).stdout
    assert json.loads(as_json) == served  # --json is the entries as the API returns them


def test_queue_sends_its_team_and_name_filters_to_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, str | None]] = []

    class FakeClient:
        def jobs(self, state: str | None, sweep: str | None, eta: bool = False, *, team: str | None = None,
                 name_glob: str | None = None) -> list[Entry]:
            asked.append({"team": team, "name_glob": name_glob})
            return [entry()]  # a service that ignored the filters: the CLI still applies them

        def inventory(self) -> list[NodeView]:
            return []

    monkeypatch.setattr(connect, "client", FakeClient)
    monkeypatch.setattr(time, "time", lambda: NOW)
    result = CliRunner().invoke(cli_main.main, ["queue", "--team", "nlp", "--name", "resnet*", "--json"])
    assert result.exit_code == 0, result.output
    assert asked == [{"team": "nlp", "name_glob": "resnet*"}]
    assert json.loads(result.stdout) == []  # the one entry is vision's


def test_queue_matches_names_locally_as_the_service_does(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeClient:  # a service that ignored the filters: the CLI's own match must agree with the service's
        def jobs(self, state: str | None, sweep: str | None, eta: bool = False, *, team: str | None = None,
                 name_glob: str | None = None) -> list[Entry]:
            return [entry("q000001"), entry("q000002")]

        def inventory(self) -> list[NodeView]:
            return []

    monkeypatch.setattr(connect, "client", FakeClient)
    monkeypatch.setattr(time, "time", lambda: NOW)
    for glob, found in (("resnet-[!t]*", 0), ("resnet-[^t]*", 0), ("resnet-[^x]*", 2), ("resnet-[!x]*", 2)):
        result = CliRunner().invoke(cli_main.main, ["queue", "--name", glob, "--json"])
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.stdout)) == found, glob


LONG_REASON = ("fragmented: 8 GPUs free in total, at most 3 on one node; no node offers 4 x A100 together "
               "(gpu-a800-1: 3 free, gpu-a800-2: 2 free, gpu-h100-1: draining)")


def _served_queue() -> list[Entry]:
    """A running entry, two the scheduler will decide in order, a throttled trial and a held one."""
    def one(id_: str, position: int | None, reason: str, submitted: float, priority: int = 50, **extra: Any) -> Entry:
        e = entry(id_, reason=reason, submitted=submitted)
        return replace(e, position=position, priority=priority, name=f"job-{id_}", **extra)
    return [
        one("q000001", None, "sweep lr-hpo-s1 at max_parallel 16: 16 running, 0 queued ahead", NOW - 900,
            sweep="lr-hpo-s1"),
        one("q000002", 2, LONG_REASON, NOW - 800, eta=NOW + 7200.0, eta_basis="estimate from class training default"),
        replace(entry("q000003", state="running", placements=[placement(["GPU-1"])], admitted=NOW - 100),
                name="job-q000003", eta=NOW + 600.0, eta_basis="runtime"),
        one("q000004", 1, "capacity reserved for an older job", NOW - 100, priority=90, eta=NOW + 60.0,
            eta_basis="runtime"),
        one("q000005", None, "held by user", NOW - 50, held=True),
    ]


def _invoke(monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str] | None = None) -> str:
    served = _served_queue()

    class FakeClient:
        def jobs(self, state: str | None, sweep: str | None, eta: bool = False, *, team: str | None = None,
                 name_glob: str | None = None) -> list[Entry]:
            return served

        def inventory(self) -> list[NodeView]:
            return [NodeView(id=NODE, name="gpu-a800-1")]

    monkeypatch.setattr(connect, "client", FakeClient)
    monkeypatch.setattr(time, "time", lambda: NOW)
    result = CliRunner().invoke(cli_main.main, ["queue", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_an_80_column_terminal_reads_each_row_on_one_line_and_its_reason_wrapped_under_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = _invoke(monkeypatch, [], env={"COLUMNS": "80", "LINES": "50", "FORCE_COLOR": "1", "TERM": "xterm"})
    lines = out.splitlines()
    assert "\t" not in out and "\x1b" not in out  # a terminal table, plain text
    assert max(len(line) for line in lines) <= 80, out
    assert lines[0].split()[:3] == ["POS", "ID", "NAME"]
    ids = [m.group(1) for line in lines if (m := re.match(r"^\s*(?:\d+|-)?\s+(q\d{6})\s", line) or
                                            re.match(r"^(q\d{6})\s", line))]
    assert ids == ["q000003", "q000004", "q000002", "q000001", "q000005"], out  # the scheduler's order
    reason_lines = [line for line in lines if line.startswith("    ") and line.strip()[:1].isalpha()]
    folded = " ".join(line.strip() for line in reason_lines)
    assert " ".join(LONG_REASON.split()) in folded, out  # whole, folded at spaces
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("fragmented"))
    long_note = lines[start:start + 3]  # three lines for 170 characters at 80 columns, never one word per line
    assert all(line.startswith("    ") and len(line.split()) > 5 for line in long_note), out
    assert re.match(r"^\s*-\s+q000001", lines[start + 3]), out
    assert "~in 2h00m" in out and "ETA estimate from class training default" in folded
    assert "sweep lr-hpo-s1 at max_parallel 16" in folded and "held by user" in folded


@pytest.mark.parametrize(("how", "expected"), [
    pytest.param(None, ["q000003", "q000004", "q000002", "q000001", "q000005"], id="position-by-default"),
    pytest.param("submitted", ["q000001", "q000002", "q000003", "q000004", "q000005"], id="submitted"),
    pytest.param("priority", ["q000004", "q000001", "q000002", "q000003", "q000005"], id="priority"),
    pytest.param("name", ["q000001", "q000002", "q000003", "q000004", "q000005"], id="name"),
])
def test_sort(monkeypatch: pytest.MonkeyPatch, how: str | None, expected: list[str]) -> None:
    out = _invoke(monkeypatch, ["--sort", how] if how else [])
    rows = [line.split("\t") for line in out.splitlines()[1:]]
    assert [r[0] for r in rows] == expected
    assert {r[0]: r[-1] for r in rows} == {"q000001": "-", "q000002": "2", "q000003": "", "q000004": "1",
                                           "q000005": "-"}
    assert {r[0]: r[7] for r in rows}["q000002"] == "in 2h00m (estimate from class training default)"


def test_a_bad_sort_is_refused_with_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(cli_main.main, ["queue", "--sort", "age"])
    assert result.exit_code == 2 and "position" in result.output
