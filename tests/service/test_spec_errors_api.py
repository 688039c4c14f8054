"""Every mistake in a submitted spec is said at once: the API's 400 keeps its one-line `error` and adds
`errors`, one located message each; the CLI prints the one line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from starlette.testclient import TestClient

from nomad_gpu.api.payloads import ErrorReply
from nomad_gpu.cli.main import main
from nomad_gpu.service.http.api import create_app
from nomad_gpu.service.loops.scheduler import SchedulerService

TYPOS = "name: demo\ntask: {image: img}\npriorty: 60\nresources: {cpus: 2, memory: 16GB}\n"
MESSAGES = [
    "line 3: priorty: unknown field (did you mean 'priority'?)",
    "line 4: resources.memory: memory is in MiB: write 15259 for '16GB' (16384 for 16GiB)",
    "line 4: resources.cpus: unknown field (did you mean 'cpu'?)",
]
"""Top to bottom; on one line, in the order of the spec's fields."""


def test_the_400_lists_every_located_message(service: SchedulerService) -> None:
    r = TestClient(create_app(service)).post("/v1/jobs", content=TYPOS,
                                             headers={"Content-Type": "application/yaml"})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["errors"] == MESSAGES
    assert body["error"] == "; ".join(MESSAGES)
    assert ErrorReply.from_json(body).errors == tuple(MESSAGES)


def test_any_other_refusal_lists_its_one_message(service: SchedulerService) -> None:
    r = TestClient(create_app(service)).get("/v1/jobs/q999999")
    assert r.status_code == 404
    assert r.json()["errors"] == [r.json()["error"]]


def test_the_cli_says_every_message_on_its_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "typos.yaml"
    spec.write_text(TYPOS)
    result = CliRunner().invoke(main, ["render", str(spec)])
    assert result.exit_code == 2
    located = [m.replace("line ", "typos.yaml:", 1) for m in MESSAGES]
    assert result.stderr.splitlines() == ["error: " + "; ".join(located)]
