"""The command line as a user meets it: help, bad input as one line and exit 2, offline render."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nomad_gpu.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", ["submit", "sweep", "queue", "status", "cancel", "inventory", "render", "serve",
                                     "dev", "dev-cluster", "demo", "bench"])
def test_every_command_has_help(command: str) -> None:
    code, out, _ = run(command, "--help")
    assert code == 0 and "Usage" in out


@pytest.mark.parametrize(("args", "fragment"), [
    pytest.param(["render", "does-not-exist.yaml"], "does-not-exist.yaml", id="missing-file"),
    pytest.param(["render", str(REPO / "pyproject.toml")], "invalid YAML", id="not-a-spec"),
    pytest.param(["bench", "--policy", "nope"], "unknown policy", id="bad-policy"),
    pytest.param(["bench", "--nodes", "0"], "0", id="bad-range"),
    pytest.param(["dev-cluster", "--cluster", "nope.yaml"], "nope.yaml", id="missing-cluster"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    code, out, err = run(*args)
    assert code == 2, (out, err)
    assert fragment in err
    assert "Traceback" not in err + out


def test_bad_spec_is_located(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\ntask: {image: busybox}\ngpu: {count: 0}\n")
    code, _, err = run("render", str(spec))
    assert code == 2
    assert "bad.yaml" in err and "gpu.count" in err
    assert len(err.strip().splitlines()) == 1


def test_render_pins_placeholders_and_every_trial(tmp_path: Path) -> None:
    code, out, _ = run("render", str(REPO / "jobspecs" / "sweep.yaml"))
    assert code == 0
    assert out.count('job "ngpu-preview-') >= 2
    assert "${device.ids}" in out or "NVIDIA_VISIBLE_DEVICES" in out


def test_submit_with_no_service_says_where_it_looked(tmp_path: Path) -> None:
    code, _, err = run("submit", str(REPO / "jobspecs" / "train.yaml"), env={"NOMAD_GPU_ADDR": "http://127.0.0.1:9"})
    assert code == 1
    assert "cannot reach nomad-gpu at http://127.0.0.1:9" in err


def test_bench_json_has_the_documented_fields() -> None:
    import json

    code, out, _ = run("bench", "--nodes", "20", "--queued", "200", "--json")
    assert code == 0
    report = json.loads(out)
    for key in ("nodes", "gpus", "queued", "admitted", "decisions_per_s", "decision_us_p50", "decision_us_p99",
                "rss_mib"):
        assert key in report
    assert report["nodes"] == 20 and report["queued"] == 200 and 0 < report["admitted"] <= 200
