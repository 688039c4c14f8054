"""Submissions meet the fleet, end to end on `mixed-fleet` through the CLI: what no node could ever run
is refused (one line, exit 2, nothing reaches the dev cluster), a short model name runs on that model (the
dev cluster's audit says where), and the opt-in queues a job that then says why it waits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from harness import dev_cluster, start_service, wait_for

from nomad_gpu.cli.main import main
from nomad_gpu.devcluster import DevCluster
from nomad_gpu.service.app import ServiceRuntime

pytestmark = pytest.mark.e2e

A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[DevCluster, ServiceRuntime]]:
    dc = dev_cluster("mixed-fleet", speed=10.0)
    runtime = start_service(dc.url, tmp_path / "q.db")
    yield dc, runtime
    runtime.stop()
    dc.stop()


def cli(runtime: ServiceRuntime, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env={"NOMAD_GPU_ADDR": runtime.address, "NOMAD_GPU_TOKEN": ""})
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, name: str, asks: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nteam: e2e\ntask: {{image: busybox}}\n{asks}\ndev: {{duration_s: 2}}\n")
    return str(path)


@pytest.mark.parametrize(("asks", "line"), [
    pytest.param("gpu: {count: 9}", "at most 8 on one node here", id="nine-gpus"),
    pytest.param("gpu: {models: [V100]}", "models here: NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3;",
                 id="model"),  # the job's pool only (`default`: no pool named); the H200s are in `reserved`
    pytest.param("mig: {profile: 1g.5gb}", "MIG profiles here: 1g.10gb", id="mig-profile"),
    pytest.param("gpu: {count: 1}\nresources: {memory: 2000000}", "2000000 MB memory on one node", id="memory"),
])
def test_never_runnable_is_one_line_exit_2_and_never_registered(fleet: tuple[DevCluster, ServiceRuntime],
                                                                 tmp_path: Path, asks: str, line: str) -> None:
    dc, runtime = fleet
    code, out, err = cli(runtime, "submit", write(tmp_path, "never", asks))
    assert code == 2, (out, err)
    assert err.strip().count("\n") == 0 and err.startswith("error: unschedulable: ") and line in err
    assert requests.get(f"{runtime.address}/v1/jobs", timeout=5).json()["entries"] == []
    assert dc.audit()["jobs"] == []


def test_a_short_model_name_runs_on_that_model(fleet: tuple[DevCluster, ServiceRuntime], tmp_path: Path) -> None:
    dc, runtime = fleet
    code, out, err = cli(runtime, "submit", "--json", write(tmp_path, "short", "gpu: {count: 2, models: [a100]}"))
    assert code == 0, err
    entry_id = out.split('"id": "')[1].split('"')[0]
    wait_for(lambda: requests.get(f"{runtime.address}/v1/jobs/{entry_id}", timeout=5).json()["state"] == "complete",
             30, "the job to complete")
    entry = requests.get(f"{runtime.address}/v1/jobs/{entry_id}", timeout=5).json()
    assert entry["spec"]["groups"][0]["gpu"]["models"] == [A100]
    a100s = {g["id"] for n in requests.get(f"{runtime.address}/v1/inventory", timeout=5).json()["nodes"]
             for g in n["gpus"] if g["model"] == A100}
    (alloc,) = [a for a in dc.audit()["allocations"] if a["job_id"] == entry["nomad_job_id"]]
    assert len(alloc["device_ids"]) == 2 and set(alloc["device_ids"]) <= a100s
    assert alloc["finished_at"] is not None


def test_the_opt_in_queues_it_and_it_says_why(fleet: tuple[DevCluster, ServiceRuntime], tmp_path: Path) -> None:
    dc, runtime = fleet
    code, out, err = cli(runtime, "submit", "--allow-unschedulable", write(tmp_path, "later", "gpu: {count: 9}"))
    assert code == 0, err
    entry_id = out.split()[0]

    def reason() -> str:
        return str(requests.get(f"{runtime.address}/v1/jobs/{entry_id}", timeout=5).json()["reason"])

    wait_for(lambda: reason().startswith("unschedulable: "), 20, "the unschedulable wait reason")
    assert "at most 8 on one node here" in reason()
    assert dc.audit()["jobs"] == []
