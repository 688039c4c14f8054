"""A serving job is reachable, end to end against the dev cluster: once it runs, the entry's `addresses`
(`GET /v1/jobs/<id>`) equal what Nomad's service catalogue publishes (`GET /v1/service/<name>`),
`nomad-gpu status` prints them, and a static host port is never held twice on one node (judged by the
dev cluster's audit), whether the other holder is our own job or a plain Nomad job."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import nomad
import pytest
import requests
from click.testing import CliRunner
from harness import start_service, submit, wait_for

from nomad_gpu import bundled
from nomad_gpu.cli.main import main
from nomad_gpu.devcluster import DevCluster
from nomad_gpu.service.app import ServiceRuntime

pytestmark = pytest.mark.e2e

SERVING = """name: {name}
team: e2e
template: service
class: serving
task: {{image: "vllm/vllm-openai:v0.6.3", args: ["--port", "8000"]}}
gpu: {{count: 1}}
resources: {{cpu: 1000, memory: 1024}}
ports: {{http: {{to: 8000}}, metrics: {{static: 9100}}}}
service: {{name: {name}, port: http, check: {{type: http, path: /health}}}}
dev: {{duration_s: 3600}}
"""


@pytest.fixture
def runtime(seed: DevCluster, tmp_path: Path) -> Iterator[ServiceRuntime]:
    rt = start_service(seed.url, tmp_path / "q.db", refusal_avoid_s=1.0)
    yield rt
    rt.stop()


def entry(rt: ServiceRuntime, entry_id: str) -> dict[str, Any]:
    return dict(requests.get(f"{rt.address}/v1/jobs/{entry_id}", timeout=5).json())


def cancel(rt: ServiceRuntime, entry_id: str) -> None:
    r = requests.delete(f"{rt.address}/v1/jobs/{entry_id}", headers={"X-Nomad-Gpu-Client": "test"}, timeout=5)
    assert r.status_code == 200, r.text


def registrations(dc: DevCluster, name: str) -> list[dict[str, Any]]:
    return list(requests.get(f"{dc.url}/v1/service/{name}", timeout=5).json())


def port_overlaps(audit: Mapping[str, Any], port: int) -> int:
    """Pairs of allocations that held `port` on one node at the same time, from placement to end."""
    runs: dict[str, list[tuple[float, float]]] = {}
    for a in audit["allocations"]:
        if port in (a.get("ports") or {}).values():
            end = a["finished_at"] if a["finished_at"] is not None else float("inf")
            runs.setdefault(a["node_id"], []).append((a["created_at"], end))
    count = 0
    for spans in runs.values():
        spans.sort()
        count += sum(1 for (_, end), (start, _) in zip(spans, spans[1:], strict=False) if start < end - 1e-9)
    return count


def test_a_running_serving_job_shows_the_address_nomad_registered(seed: DevCluster, runtime: ServiceRuntime) -> None:
    (chat,) = submit(runtime, SERVING.format(name="chat"))
    wait_for(lambda: bool(entry(runtime, chat["id"])["addresses"]), 60, "the entry's addresses")
    shown = entry(runtime, chat["id"])
    assert shown["state"] == "running"
    (registration,) = registrations(seed, "chat")
    assert shown["addresses"]["http"] == f"{registration['Address']}:{registration['Port']}"
    assert registration["JobID"] == shown["nomad_job_id"]
    assert shown["addresses"]["metrics"] == f"{registration['Address']}:9100"
    result = CliRunner().invoke(main, ["status", chat["id"]],
                                env={"NOMAD_GPU_ADDR": runtime.address, "NOMAD_GPU_TOKEN": ""})
    assert result.exit_code == 0, result.output
    assert f"http  {shown['addresses']['http']} (service chat)" in result.stdout
    assert f"metrics  {registration['Address']}:9100" in result.stdout
    listed = requests.get(f"{runtime.address}/v1/jobs", timeout=5).json()["entries"]
    assert [e["addresses"] for e in listed] == [shown["addresses"]]
    cancel(runtime, chat["id"])
    wait_for(lambda: registrations(seed, "chat") == [], 60, "the registration to go with the job")
    assert entry(runtime, chat["id"])["addresses"] == {}


def test_a_static_port_is_never_held_twice_on_the_node(seed: DevCluster, runtime: ServiceRuntime) -> None:
    (first,) = submit(runtime, SERVING.format(name="first"))
    wait_for(lambda: entry(runtime, first["id"])["state"] == "running", 60, "the first running")
    (second,) = submit(runtime, SERVING.format(name="second"))
    for _ in range(3):  # several cycles: it stays queued, never sent beside the port's holder
        wait_for(lambda: entry(runtime, second["id"])["state"] == "queued", 30, "the second queued")
    assert entry(runtime, second["id"])["addresses"] == {}
    assert entry(runtime, second["id"])["reason"].startswith("static port 9100 in use on gpu-a800-1; ")
    cancel(runtime, first["id"])
    wait_for(lambda: entry(runtime, second["id"])["state"] == "running", 60, "the second running once freed")
    assert entry(runtime, second["id"])["addresses"]["metrics"].endswith(":9100")
    assert port_overlaps(seed.audit(), 9100) == 0
    assert entry(runtime, second["id"])["refusals"] == 0, "the port was respected before Nomad had to refuse"


def test_a_port_a_plain_nomad_job_holds_is_left_to_it(seed: DevCluster, runtime: ServiceRuntime) -> None:
    client = nomad.Nomad(address=seed.url, timeout=5)
    (node,) = requests.get(f"{seed.url}/v1/nodes", timeout=5).json()
    hcl = ('job "exporter" {\n  type = "service"\n  constraint {\n    attribute = "${node.unique.id}"\n'
           f'    value = "{node["ID"]}"\n  }}\n  meta {{\n    nomad_gpu_dev_duration_s = "3600"\n  }}\n'
           '  group "g" {\n    network {\n      port "metrics" {\n        static = 9100\n      }\n    }\n'
           '    task "t" {\n      driver = "docker"\n      config {\n        image = "prom/node-exporter"\n'
           '      }\n    }\n  }\n}\n')
    client.jobs.register_job({"Job": client.jobs.parse(hcl, canonicalize=True)})
    wait_for(lambda: any(a["job_id"] == "exporter" and a["client_status"] == "running"
                         for a in seed.audit()["allocations"]), 30, "the plain job running")
    (chat,) = submit(runtime, SERVING.format(name="chat"))
    for _ in range(3):  # several cycles: it stays queued, never running beside the port's holder
        wait_for(lambda: entry(runtime, chat["id"])["state"] == "queued", 30, "chat queued")
    client.job.deregister_job("exporter")
    wait_for(lambda: entry(runtime, chat["id"])["state"] == "running", 60, "chat running once the port is free")
    assert port_overlaps(seed.audit(), 9100) == 0
    assert entry(runtime, chat["id"])["refusals"] == 0, "the port was respected before Nomad had to refuse"


@pytest.mark.parametrize(("example", "service"), [("serving-openai", "chat"), ("notebook-reachable", "carol-lab")])
def test_the_reachable_examples_run_and_show_their_registered_address(
        seed: DevCluster, runtime: ServiceRuntime, example: str, service: str) -> None:
    (shown,) = submit(runtime, bundled.example(example))
    wait_for(lambda: bool(entry(runtime, shown["id"])["addresses"]), 60, f"{example}'s address")
    (registration,) = registrations(seed, service)
    assert entry(runtime, shown["id"])["addresses"] == {"http": f"{registration['Address']}:{registration['Port']}"}
