"""Group ports and native service registrations, as Nomad v2.0.5 does them: `network` and `service` blocks
parse (jobspec2), dynamic ports come from the node's range and static ones are refused where taken
("network: reserved port collision", `BinPackIterator`), the allocation carries its ports in
`AllocatedResources.Shared`, and `GET /v1/service/<name>` lists the running allocations' addresses."""

from __future__ import annotations

from typing import Any

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.devcluster.hcl import parse_job_hcl

from .conftest import TWO_NODES, ClusterFactory
from .helpers import jobspec, submit, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`

NETWORK = '''
    network {
      port "http" {
        to = 8000
      }
      port "metrics" {
        static = 9100
      }
    }

    service {
      name     = "chat"
      port     = "http"
      provider = "nomad"
      tags     = ["llm"]

      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }
'''


def _reachable(job_id: str, *, node: str | None = None, duration: float = 3600, network: str = NETWORK,
               **options: Any) -> str:
    return jobspec(job_id, duration=duration, node=node, **options).replace(
        '    task "work" {', network + '    task "work" {', 1)


def _node_id(cluster: DevCluster, name: str) -> str:
    nodes = requests.get(f"{cluster.url}/v1/nodes", timeout=5).json()
    return str(next(n["ID"] for n in nodes if n["Name"] == name))


def _allocs(cluster: DevCluster, job_id: str) -> list[dict[str, Any]]:
    stubs = requests.get(f"{cluster.url}/v1/job/{job_id}/allocations", timeout=5).json()
    return [requests.get(f"{cluster.url}/v1/allocation/{a['ID']}", timeout=5).json() for a in stubs]


def test_network_and_service_blocks_parse_as_jobspec2_decodes_them() -> None:
    job = parse_job_hcl(_reachable("web"))
    (group,) = job["TaskGroups"]
    (network,) = group["Networks"]
    assert network["DynamicPorts"] == [{"Label": "http", "Value": 0, "To": 8000, "HostNetwork": "",
                                        "IgnoreCollision": False}]
    assert network["ReservedPorts"] == [{"Label": "metrics", "Value": 9100, "To": 0, "HostNetwork": "",
                                         "IgnoreCollision": False}]
    (service,) = group["Services"]
    assert (service["Name"], service["PortLabel"], service["Provider"], service["Tags"]) == (
        "chat", "http", "nomad", ["llm"])
    (check,) = service["Checks"]
    assert (check["Type"], check["Path"], check["Interval"], check["Timeout"]) == (
        "http", "/health", 10 * 10**9, 2 * 10**9)


def test_the_allocation_gets_a_dynamic_port_from_the_range_and_its_static_one(
        make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, _reachable("web", node=_node_id(cluster, "n1")))
    (alloc,) = wait_until(lambda: [a for a in _allocs(cluster, "web") if a["ClientStatus"] == "running"],
                          what="web running")
    node = requests.get(f"{cluster.url}/v1/node/{alloc['NodeID']}", timeout=5).json()
    address = node["NodeResources"]["NodeNetworks"][0]["Addresses"][0]["Address"]
    ports = {p["Label"]: p for p in alloc["AllocatedResources"]["Shared"]["Ports"]}
    assert set(ports) == {"http", "metrics"}
    assert 20000 <= ports["http"]["Value"] <= 32000 and ports["http"]["To"] == 8000
    assert (ports["metrics"]["Value"], ports["metrics"]["To"]) == (9100, 0)
    assert {p["HostIP"] for p in ports.values()} == {address}
    (network,) = alloc["AllocatedResources"]["Shared"]["Networks"]
    assert network["IP"] == address
    assert network["DynamicPorts"][0]["Value"] == ports["http"]["Value"]
    assert network["ReservedPorts"][0]["Value"] == 9100


def test_a_nomad_service_is_registered_while_running_and_removed_when_stopped(
        make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    assert requests.get(f"{cluster.url}/v1/service/chat", timeout=5).json() == []
    submit(client, _reachable("web", node=_node_id(cluster, "n1")))
    (registration,) = wait_until(lambda: requests.get(f"{cluster.url}/v1/service/chat", timeout=5).json(),
                                 what="the registration")
    (alloc,) = _allocs(cluster, "web")
    http = next(p for p in alloc["AllocatedResources"]["Shared"]["Ports"] if p["Label"] == "http")
    assert registration["ID"] == f"_nomad-task-{alloc['ID']}-group-main-chat-http"
    assert (registration["ServiceName"], registration["Namespace"], registration["JobID"],
            registration["AllocID"], registration["NodeID"], registration["Datacenter"], registration["Tags"]) == (
        "chat", "default", "web", alloc["ID"], alloc["NodeID"], "dc1", ["llm"])
    assert (registration["Address"], registration["Port"]) == (http["HostIP"], http["Value"])
    assert registration["CreateIndex"] == registration["ModifyIndex"] > 0
    listing = requests.get(f"{cluster.url}/v1/services", timeout=5).json()
    assert listing == [{"Namespace": "default", "Services": [{"ServiceName": "chat", "Tags": ["llm"]}]}]
    client.job.deregister_job("web")
    wait_until(lambda: requests.get(f"{cluster.url}/v1/service/chat", timeout=5).json() == [],
               what="the registration removed")
    assert requests.get(f"{cluster.url}/v1/services", timeout=5).json() == []


def test_a_consul_service_is_accepted_and_never_registered(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, _reachable("web", network=NETWORK.replace('"nomad"', '"consul"')))
    wait_until(lambda: [a for a in _allocs(cluster, "web") if a["ClientStatus"] == "running"], what="running")
    assert requests.get(f"{cluster.url}/v1/service/chat", timeout=5).json() == []


def test_a_static_port_taken_on_the_node_is_refused_as_nomad_words_it(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    n1 = _node_id(cluster, "n1")
    submit(client, _reachable("first", node=n1))
    wait_until(lambda: [a for a in _allocs(cluster, "first") if a["ClientStatus"] == "running"], what="running")
    submit(client, _reachable("second", node=n1, network=NETWORK.replace('"chat"', '"other"')))
    evaluations = wait_until(lambda: [e for e in requests.get(f"{cluster.url}/v1/job/second/evaluations",
                                                             timeout=5).json() if e.get("FailedTGAllocs")],
                             what="the refusal")
    metric = evaluations[0]["FailedTGAllocs"]["main"]
    assert metric["DimensionExhausted"] == {"network: reserved port collision metrics=9100": 1}
    assert _allocs(cluster, "second") == []
    # the same job on another node takes the port there: ports are per node
    submit(client, _reachable("third", node=_node_id(cluster, "n2"), network=NETWORK.replace('"chat"', '"x"')))
    wait_until(lambda: [a for a in _allocs(cluster, "third") if a["ClientStatus"] == "running"], what="third")
    # when the holder ends, the waiting job is placed and takes the port
    client.job.deregister_job("first")
    (placed,) = wait_until(lambda: [a for a in _allocs(cluster, "second") if a["ClientStatus"] == "running"],
                           what="second placed after the port freed")
    assert any(p["Value"] == 9100 for p in placed["AllocatedResources"]["Shared"]["Ports"])


def test_dynamic_ports_of_one_node_never_repeat(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    dynamic_only = NETWORK.replace('static = 9100', '').replace('"nomad"', '"consul"')
    for i in range(12):
        submit(client, _reachable(f"w{i}", node=_node_id(cluster, "n1"), network=dynamic_only, cpu=100, memory=64))
    ports = wait_until(lambda: [p["Value"] for i in range(12) for a in _allocs(cluster, f"w{i}")
                                for p in a["AllocatedResources"]["Shared"]["Ports"]], what="placed")
    assert len(ports) == 24 and len(set(ports)) == 24


@pytest.mark.parametrize(("network", "error"), [
    pytest.param(NETWORK.replace('port     = "http"', 'port     = "web"'),
                 'port label "web" referenced by services chat does not exist', id="unknown-port"),
    pytest.param(NETWORK.replace('type     = "http"', 'type     = "script"'),
                 'invalid check type ("script"), must be one of tcp, http', id="nomad-script-check"),
    pytest.param(NETWORK.replace('interval = "10s"', 'interval = "500ms"'),
                 "interval (0.5s) cannot be lower than 1s", id="short-interval"),
    pytest.param(NETWORK.replace('name     = "chat"', 'name     = "chat_bot"'),
                 "Service name must be valid", id="bad-name"),
])
def test_a_job_nomad_would_refuse_is_refused(make_cluster: ClusterFactory, network: str, error: str) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    with pytest.raises(nomad.api.exceptions.BaseNomadException) as refused:
        submit(client, _reachable("bad", network=network))
    assert error in refused.value.nomad_resp.text


def test_the_registration_goes_when_the_kill_begins_not_when_it_ends(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES, speed=1.0)  # a 30 s kill_timeout takes 30 s: the stop is seen mid-way
    client = nomad.Nomad(address=cluster.url, timeout=5)
    hcl = _reachable("web").replace('driver = "docker"', 'driver = "docker"\n      kill_timeout = "30s"', 1)
    submit(client, hcl)
    wait_until(lambda: requests.get(f"{cluster.url}/v1/service/chat", timeout=5).json(), what="registered")
    client.job.deregister_job("web")
    (alloc,) = _allocs(cluster, "web")
    assert (alloc["DesiredStatus"], alloc["ClientStatus"]) == ("stop", "running")  # still being killed
    assert requests.get(f"{cluster.url}/v1/service/chat", timeout=5).json() == []


def test_the_catalogue_is_read_per_namespace_and_needs_a_name(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(TWO_NODES)
    client = nomad.Nomad(address=cluster.url, timeout=5)
    submit(client, _reachable("web"))
    wait_until(lambda: requests.get(f"{cluster.url}/v1/service/chat", timeout=5).json(), what="registered")
    assert requests.get(f"{cluster.url}/v1/service/chat?namespace=other", timeout=5).json() == []
    assert len(requests.get(f"{cluster.url}/v1/service/chat?namespace=*", timeout=5).json()) == 1
    missing = requests.get(f"{cluster.url}/v1/service/", timeout=5)
    assert (missing.status_code, missing.text) == (400, "missing service name")
