"""`nomad-gpu deploy render`: the service's Nomad job for an operator, written offline.

The job names files and flags that must exist: its command line is read back by `serve`'s own option
parser, and no token the operator holds ever lands in it.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from nomad_gpu.cli.deploy import render as render_command
from nomad_gpu.cli.main import main
from nomad_gpu.cli.runcmds import serve
from nomad_gpu.domain.ids import Team
from nomad_gpu.render import parse_hcl

# Distinctive secrets an operator has at hand while rendering: none may reach the job file.
TEAM_TOKEN = "team-vision-7f3c9a1e5b2d4c6f8a0e"
ADMIN_TOKEN = "admin-0d9e8f7a6b5c4d3e2f1a"
NOMAD_TOKEN = "b5f9c1d0-4e2a-4c1b-9d3e-7a6f5e4d3c2b"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def _args_of(hcl: str) -> list[str]:
    job = parse_hcl(hcl)["job"][0]['"nomad-gpu"']
    task = job["group"][0]['"nomad-gpu"']["task"][0]['"nomad-gpu"']
    return [arg.strip('"') for arg in task["config"][0]["args"]]


def test_deploy_render_writes_a_job_that_parses() -> None:
    code, out, err = run("deploy", "render", "--image", "ghcr.io/example/nomad-gpu:0.1", "--node-pool", "control",
                         "--datacenter", "dc1", "--datacenter", "dc2", "--namespace", "ops")
    assert code == 0, err
    job = parse_hcl(out)["job"][0]['"nomad-gpu"']
    assert (job["node_pool"], job["namespace"], job["datacenters"]) == ('"control"', '"ops"', ['"dc1"', '"dc2"'])
    assert 'nomadVar \\"nomad/jobs/nomad-gpu\\"' in out  # the Variable the job's own identity may read
    assert '"https://${NOMAD_ADDR_api}"' in out and 'path     = "/v1/status"' in out


def test_deploy_render_writes_a_file(tmp_path: Path) -> None:
    dest = tmp_path / "nomad-gpu.hcl"
    code, out, err = run("deploy", "render", "--driver", "raw_exec", "--command", "/opt/nomad-gpu/bin/nomad-gpu",
                         "--port", "0", "--no-tls", "--nomad-addr", "http://127.0.0.1:4646", "-o", str(dest))
    assert code == 0, err
    assert out == "" and "nomad job run" in err
    hcl = dest.read_text()
    assert 'driver       = "raw_exec"' in hcl and "static" not in hcl and "NOMAD_CACERT" not in hcl
    assert "volume_mount" not in hcl and 'source    = "nomad-gpu"' in hcl  # raw_exec mounts nothing
    assert "http://${NOMAD_ADDR_api}" in hcl


@pytest.mark.parametrize("tls", [["--tls", "--nomad-client-cert"], ["--no-tls"]])
def test_serve_accepts_the_command_line_the_job_runs(tls: list[str]) -> None:
    """The job's args, with Nomad's interpolations filled in as its client would, parse as `serve` flags."""
    code, out, err = run("deploy", "render", "--image", "i", *tls)
    assert code == 0, err
    args = _args_of(out)
    assert args[0] == "serve"
    filled = [re.sub(r"\$\{NOMAD_SECRETS_DIR\}", "/secrets", re.sub(r"\$\{NOMAD_ADDR_api\}", "10.0.0.5:4690", a))
              for a in args[1:]]
    context = serve.make_context("serve", filled)  # an unknown flag or a missing value raises here
    assert context.params["listen"] in ("https://10.0.0.5:4690", "http://10.0.0.5:4690")
    assert context.params["config_path"] == "/secrets/config.yaml"
    assert context.params["db_path"] == "/var/lib/nomad-gpu/queue.db"
    if "--tls" in tls:
        assert (context.params["tls_cert"], context.params["tls_key"]) == ("/secrets/tls-cert.pem",
                                                                            "/secrets/tls-key.pem")


def test_no_token_reaches_the_job(tmp_path: Path) -> None:
    """Tokens in the operator's environment and config file stay out of the rendered job."""
    config = tmp_path / "config.yaml"
    config.write_text(f"api:\n  tokens:\n    {TEAM_TOKEN}: {{team: vision}}\n    {ADMIN_TOKEN}: {{admin: true}}\n")
    env = {"NOMAD_TOKEN": NOMAD_TOKEN, "NOMAD_GPU_TOKEN": ADMIN_TOKEN, "NOMAD_GPU_CONFIG": str(config)}
    outputs = []
    for extra in ([], ["--driver", "exec", "--no-tls", "--nomad-client-cert"],
                  ["--env", f"NOMAD_GPU_WATCH_NAMESPACES={tmp_path.name}"]):
        image = [] if "exec" in extra else ["--image", "i"]
        code, out, err = run("deploy", "render", *image, *extra, env=env)
        assert code == 0, err
        outputs.append(out)
    for out in outputs:
        for secret in (TEAM_TOKEN, ADMIN_TOKEN, NOMAD_TOKEN):
            assert secret not in out
        assert "NOMAD_TOKEN={{ .nomad_token }}" in out  # read from the Variable when the task starts
    code, _, err = run("deploy", "render", "--image", "i", "--env", f"NOMAD_TOKEN={NOMAD_TOKEN}", env=env)
    assert code == 2 and "looks like a secret" in err and NOMAD_TOKEN not in err


@pytest.mark.parametrize(("args", "fragment"), [
    pytest.param([], "--driver docker needs --image", id="no-image"),
    pytest.param(["--driver", "exec", "--image", "i"], "--image is for --driver docker", id="image-with-exec"),
    pytest.param(["--image", "i", "--env", "NOVALUE"], "must be KEY=VALUE", id="env-pair"),
    pytest.param(["--image", "i", "--variable", "nomad"], "invalid Nomad Variable path", id="variable"),
    pytest.param(["--image", "i", "--port", "70000"], "70000", id="port"),
    pytest.param(["--image", "i", "--job-id", "two words"], "invalid Nomad job id", id="job-id"),
])
def test_bad_flags_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    code, out, err = run("deploy", "render", *args)
    assert code == 2, (out, err)
    assert fragment in err and "Traceback" not in err + out


def test_help_explains_every_flag() -> None:
    code, out, _ = run("deploy", "render", "--help")
    assert code == 0
    for param in render_command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{param.name} has no help"
            assert param.opts[-1] in out
    for item in ("config", "nomad_token", "check_token", "tls_cert", "tls_key", "nomad_ca_cert", "nomad var put"):
        assert item in out


DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DEPLOY_DOC.read_text(), flags=re.S)


def test_the_deploy_page_renders_what_it_says(tmp_path: Path) -> None:
    """docs/deploy.md: its config loads, its render command runs, and its `nomad var put` fills every item the
    rendered job reads from the Variable."""
    from nomad_gpu.service.config.settings import load_config

    (config_text,) = [b for b in _blocks("yaml") if b.startswith("# config.yaml")]
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    scheduling, access = load_config(str(config))
    assert set(access.tokens.values()) == {"vision", "nlp", "monitoring", None}
    assert {str(team) for team in scheduling.fair.teams} == {"vision", "nlp", "monitoring"}
    assert scheduling.fair.teams[Team("monitoring")].quota_gpu == 0  # the check's team holds no GPU
    shell = "\n".join(_blocks("sh")).replace("\\\n", " ")
    renders = [line for line in shell.splitlines() if line.startswith("nomad-gpu deploy render")]
    puts = [line for line in shell.splitlines() if line.startswith("nomad var put")]
    assert len(renders) == len(puts) == 2  # one service on SQLite, then the replicas on PostgreSQL
    for render_line, put_line in zip(renders, puts, strict=True):
        code, out, err = run(*render_line.split(">")[0].split()[1:])
        assert code == 0, err
        put_items = {word.split("=")[0] for word in put_line.split() if "=" in word}
        read_items = set(re.findall(r"\{\{ \.(\w+) \}\}", out))
        assert read_items == put_items, render_line
        assert "nomad/jobs/nomad-gpu" in put_line and "check_token=c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8" in put_line
    assert "--replicas 3" in renders[1] and "db_url=postgresql://" in puts[1]
