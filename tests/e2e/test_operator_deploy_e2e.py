"""An operator deploys the service on the dev cluster, as docs/deploy.md says, with ACLs and TLS.

`nomad var put` of the config (team tokens), the service's Nomad token, the check's token and the TLS
files; `nomad-gpu deploy render`; parse and register (`nomad job run`). The dev cluster runs no task, so
this test plays Nomad's client for the one allocation: with the task's workload identity it reads the
Variable and renders the job's `template` blocks into a secrets directory, interpolates the job's
command line and env, and starts exactly that command. Then the health check (its header filled from the
template's env), a team submitting to the GPU pool and another team not seeing it show that the service
took its tokens from the Variable.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from harness import wait_for

from nomad_gpu.cli.main import main
from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.acl import AclToken

OPERATOR = "operator-management-token"
SERVICE = "nomad-gpu-service-acl-token"
VISION = "vision-7f3c9a1e5b2d4c6f8a0e"
NLP = "nlp-0a9b8c7d6e5f4a3b2c1d"
CHECK = "monitoring-c3d2e1f0a9b8c7d6"
ADMIN = "admin-e4f5a6b7c8d9e0f1a2b3"
CLUSTER = {"name": "deploy", "nodes": [
    {"name": "ctl", "node_pool": "control", "cpu_shares": 4000, "memory_mb": 8192, "host_volumes": ["nomad-gpu"]},
    {"name": "gpu1", "node_pool": "gpu", "cpu_shares": 16000, "memory_mb": 65536,
     "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]}]}
CONFIG = f"""\
teams:
  vision: {{weight: 2, quota_gpu: 2}}
  nlp: {{weight: 1}}
  monitoring: {{quota_gpu: 0}}
api:
  tokens:
    "{VISION}": {{team: vision}}
    "{NLP}": {{team: nlp}}
    "{CHECK}": {{team: monitoring}}
    "{ADMIN}": {{admin: true}}
  node_pools: [gpu]
tick_s: 0.5
"""


def _certificate(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "nomad-gpu.pem", tmp / "nomad-gpu-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _render_template(data: str, read_var: Any) -> str:
    """The `{{ with nomadVar "P" }}...{{ .item }}...{{ end }}` templates the job carries, with
    `error_on_missing_key` (a missing item fails, as Nomad's template runner does)."""
    def block(match: re.Match[str]) -> str:
        items = read_var(match.group(1))
        return re.sub(r"\{\{ \.(\w+) \}\}", lambda m: items[m.group(1)], match.group(2))
    out = re.sub(r'\{\{ with nomadVar "([^"]+)" \}\}(.*?)\{\{ end \}\}', block, data, flags=re.S)
    assert "{{" not in out, f"a template form this test does not play: {out!r}"
    return out


def _interpolate(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{([A-Za-z0-9_.]+)\}", lambda m: env[m.group(1)], text)


@pytest.mark.e2e
def test_an_operator_deploys_the_service_with_its_tokens_from_a_variable(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the service's certificate")
    cert, key = _certificate(tmp_path)
    tokens = (AclToken(OPERATOR, management=True), AclToken(SERVICE, {"*": ("write",)}, node="read"))
    with DevCluster(CLUSTER, speed=20, heartbeat_s=0.5, acl_tokens=tokens) as dc:
        operator = {"X-Nomad-Token": OPERATOR}
        # nomad var put -namespace default nomad/jobs/nomad-gpu config=@config.yaml nomad_token=... ...
        items = {"config": CONFIG, "nomad_token": SERVICE, "check_token": CHECK,
                 "tls_cert": cert.read_text(), "tls_key": key.read_text()}
        put = requests.put(f"{dc.url}/v1/var/nomad/jobs/nomad-gpu", json={"Namespace": "default", "Items": items},
                           headers=operator, timeout=5)
        assert put.status_code == 200, put.text
        # nomad-gpu deploy render ... > nomad-gpu.hcl (raw_exec: this machine's nomad-gpu, no container)
        data_dir = tmp_path / "volume"
        data_dir.mkdir()
        rendered = CliRunner().invoke(main, [
            "deploy", "render", "--driver", "raw_exec", "--command", str(Path(sys.executable).parent / "nomad-gpu"),
            "--node-pool", "control", "--port", "0", "--nomad-addr", dc.url, "--data-dir", str(data_dir)])
        assert rendered.exit_code == 0, rendered.stderr
        hcl = rendered.stdout
        for secret in (SERVICE, VISION, NLP, CHECK, ADMIN, key.read_text().splitlines()[1]):
            assert secret not in hcl
        # nomad job run nomad-gpu.hcl
        parsed = requests.post(f"{dc.url}/v1/jobs/parse", json={"JobHCL": hcl}, headers=operator, timeout=10)
        assert parsed.status_code == 200, parsed.text
        registered = requests.post(f"{dc.url}/v1/jobs", headers=operator, timeout=10, json={
            "Job": parsed.json(), "Submission": {"Source": hcl, "Format": "hcl2"}})
        assert registered.status_code == 200, registered.text
        wait_for(lambda: any(a["job_id"] == "nomad-gpu" for a in dc.audit()["allocations"]), what="placement")
        (alloc,) = [a for a in dc.audit()["allocations"] if a["job_id"] == "nomad-gpu"]
        assert alloc["node_id"] == dc.node_ids()["ctl"]

        # -- what Nomad's client does for the task -------------------------------------------------------
        job = requests.get(f"{dc.url}/v1/job/nomad-gpu", headers=operator, timeout=5).json()
        task = job["TaskGroups"][0]["Tasks"][0]
        identity = requests.get(f"{dc.url}/_dev/allocation/{alloc['alloc_id']}/identity", timeout=5).json()["Token"]

        def read_var(path: str) -> dict[str, str]:
            answer = requests.get(f"{dc.url}/v1/var/{path}", headers={"X-Nomad-Token": identity}, timeout=5)
            assert answer.status_code == 200, answer.text
            return dict(answer.json()["Items"])

        task_dir = tmp_path / "alloc" / "nomad-gpu"
        (task_dir / "secrets").mkdir(parents=True)
        template_env: dict[str, str] = {}
        for template in task["Templates"]:
            text = _render_template(template["EmbeddedTmpl"], read_var)
            (task_dir / template["DestPath"]).write_text(text)
            if template["Envvars"]:
                for line in text.splitlines():
                    name, sep, value = line.partition("=")
                    if sep:
                        template_env[name] = value
        assert template_env == {"NOMAD_TOKEN": SERVICE, "NOMAD_GPU_CHECK_TOKEN": CHECK}
        port = _free_port()  # the dev cluster does not allocate ports: the client's pick, as for a dynamic one
        runtime = {"NOMAD_SECRETS_DIR": str(task_dir / "secrets"), "NOMAD_ADDR_api": f"127.0.0.1:{port}",
                   **template_env}
        argv = [task["Config"]["command"], *(_interpolate(arg, runtime) for arg in task["Config"]["args"])]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "REQUESTS_"))}
        env.update({k: _interpolate(v, runtime) for k, v in task["Env"].items()}, **template_env)
        log = (tmp_path / "serve.log").open("w")
        proc = subprocess.Popen(argv, env=env, cwd=task_dir, stdout=log, stderr=subprocess.STDOUT)
        try:
            address = f"https://127.0.0.1:{port}"
            (service,) = task["Services"]
            (check,) = service["Checks"]
            headers = {k: _interpolate(v[0], runtime) for k, v in check["Header"].items()}

            def healthy() -> bool:  # Nomad's checker: GET path, the interpolated headers, 2xx passes
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                try:
                    return requests.get(f"{address}{check['Path']}", headers=headers, verify=str(cert),
                                        timeout=2).status_code == 200
                except requests.ConnectionError:
                    return False

            wait_for(healthy, timeout_s=60, what="the service's health check")
            assert requests.get(f"{address}/v1/status", verify=str(cert), timeout=5).status_code == 401
            spec = ("name: detector\nteam: vision\nnode_pool: gpu\ntask: {image: busybox}\n"
                    "resources: {cpu: 1000, memory: 1024}\ngpu: {count: 1}\ndev: {duration_s: 600}\n")
            submitted = requests.post(f"{address}/v1/jobs", data=spec.encode(), verify=str(cert), timeout=10,
                                      headers={"Content-Type": "application/yaml",
                                               "Authorization": f"Bearer {VISION}"})
            assert submitted.status_code == 201, submitted.text
            (entry,) = submitted.json()["entries"]
            wait_for(lambda: any(a["job_id"] == entry["nomad_job_id"] and a["node_id"] == dc.node_ids()["gpu1"]
                                 for a in dc.audit()["allocations"]), timeout_s=60,
                     what="the vision team's job placed on the GPU pool through the service's Nomad token")
            other = requests.get(f"{address}/v1/jobs/{entry['id']}", verify=str(cert), timeout=5,
                                 headers={"Authorization": f"Bearer {NLP}"})
            assert other.status_code == 404  # another team's entry is not there for nlp
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()
