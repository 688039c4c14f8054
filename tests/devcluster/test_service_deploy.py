"""An operator's deploy on the dev cluster: the job `nomad-gpu deploy render` writes is parsed by
`/v1/jobs/parse`, registered with its source, and placed on the control node whose client declares the
host volume, never in the GPU pool; its port, service check and templates come back as Nomad's Job JSON.
A service naming a port its group lacks is refused as Nomad's `validateServices` refuses it
(`nomad/structs/structs.go`, v2.0.5)."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests
from click.testing import CliRunner

from nomad_gpu.cli.main import main

from .conftest import ClusterFactory
from .helpers import job_allocs, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`

CONTROL_AND_GPU: dict[str, Any] = {
    "name": "control-and-gpu",
    "nodes": [
        {"name": "ctl", "node_pool": "control", "cpu_shares": 4000, "memory_mb": 8192, "host_volumes": ["nomad-gpu"]},
        {"name": "gpu1", "node_pool": "gpu", "cpu_shares": 8000, "memory_mb": 16384, "host_volumes": ["nomad-gpu"],
         "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_mib": 81920}]},
        {"name": "ctl2", "node_pool": "control", "cpu_shares": 4000, "memory_mb": 8192},
    ],
}


def _render(*args: str) -> str:
    result = CliRunner().invoke(main, ["deploy", "render", *args])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _parse(url: str, hcl: str) -> requests.Response:
    return requests.post(f"{url}/v1/jobs/parse", json={"JobHCL": hcl, "Canonicalize": False}, timeout=10)


@pytest.mark.parametrize("driver", [["--image", "ghcr.io/example/nomad-gpu:0.1"],
                                    ["--driver", "exec", "--command", "/usr/local/bin/nomad-gpu", "--port", "0"]])
def test_the_rendered_service_job_registers_and_places(make_cluster: ClusterFactory, driver: list[str]) -> None:
    cluster = make_cluster(CONTROL_AND_GPU)
    hcl = _render(*driver, "--node-pool", "control")
    parsed = _parse(cluster.url, hcl)
    assert parsed.status_code == 200, parsed.text
    job = parsed.json()
    group = job["TaskGroups"][0]
    task = group["Tasks"][0]
    ports = [*(group["Networks"][0]["ReservedPorts"] or []), *(group["Networks"][0]["DynamicPorts"] or [])]
    assert [port["Label"] for port in ports] == ["api"]
    (service,) = task["Services"]
    assert (service["Name"], service["PortLabel"], service["Provider"]) == ("nomad-gpu", "api", "nomad")
    (check,) = service["Checks"]
    assert (check["Type"], check["Path"]) == ("http", "/v1/status")
    assert check["Header"] == {"Authorization": ["Bearer ${NOMAD_GPU_CHECK_TOKEN}"]}
    assert {t["DestPath"] for t in task["Templates"]} >= {"secrets/config.yaml", "secrets/nomad-gpu.env"}
    client = nomad.Nomad(address=cluster.url, timeout=5)
    client.jobs.register_job({"Job": job, "Submission": {"Source": hcl, "Format": "hcl2"}})
    wait_until(lambda: job_allocs(cluster.audit(), "nomad-gpu"))
    (alloc,) = job_allocs(cluster.audit(), "nomad-gpu")
    assert alloc["node_id"] == cluster.node_ids()["ctl"]  # the control pool's node with the volume
    stored = client.job.get_job("nomad-gpu")
    assert stored["TaskGroups"][0]["Tasks"][0]["Templates"][0]["ChangeMode"] == "restart"  # canonical default
    submission = requests.get(f"{cluster.url}/v1/job/nomad-gpu/submission?version=0", timeout=5)
    assert submission.status_code == 200 and submission.json()["Source"] == hcl


def test_a_service_on_a_missing_port_is_refused(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CONTROL_AND_GPU)
    hcl = _render("--image", "i", "--node-pool", "control").replace('port     = "api"', 'port     = "http"')
    parsed = _parse(cluster.url, hcl)
    assert parsed.status_code == 200, parsed.text
    answer = requests.post(f"{cluster.url}/v1/jobs", json={"Job": parsed.json()}, timeout=5)
    assert answer.status_code == 500
    assert 'port label "http" referenced by services nomad-gpu does not exist' in answer.text


def test_a_template_without_a_destination_is_refused(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(CONTROL_AND_GPU)
    hcl = _render("--image", "i", "--node-pool", "control").replace(
        'destination          = "secrets/config.yaml"\n', "", 1)
    parsed = _parse(cluster.url, hcl)
    assert parsed.status_code == 200, parsed.text
    answer = requests.post(f"{cluster.url}/v1/jobs", json={"Job": parsed.json()}, timeout=5)
    assert answer.status_code == 500 and "Must specify a destination for the template" in answer.text


@pytest.mark.parametrize(("provider", "status", "text"), [
    pytest.param("nomad", 500, "tls_skip_verify may only be set for Consul service checks", id="nomad"),
    pytest.param("consul", 200, "", id="consul"),
])
def test_tls_skip_verify_is_for_consul_checks_only(make_cluster: ClusterFactory, provider: str, status: int,
                                                   text: str) -> None:
    """`ServiceCheck.validateNomad` (nomad/structs/services.go, v2.0.5); deploy render writes it for Consul only."""
    cluster = make_cluster(CONTROL_AND_GPU)
    hcl = _render("--image", "i", "--node-pool", "control", "--service-provider", provider)
    assert ("tls_skip_verify" in hcl) is (provider == "consul")
    if provider == "nomad":
        hcl = hcl.replace('timeout  = "3s"', 'timeout  = "3s"\n          tls_skip_verify = true')
    parsed = _parse(cluster.url, hcl)
    assert parsed.status_code == 200, parsed.text
    answer = requests.post(f"{cluster.url}/v1/jobs", json={"Job": parsed.json()}, timeout=5)
    assert answer.status_code == status and text in answer.text
