"""The Nomad client edge against the dev cluster: plain-text errors become our own error types."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.client import NomadClient, NomadNotFound, NomadRejected, NomadSettings, NomadUnavailable
from nomad_gpu.nomad.decode import decode_node

CLUSTER = Path(__file__).resolve().parents[2] / "clusters" / "mig-h100.yaml"


@pytest.fixture(scope="module")
def client() -> Iterator[NomadClient]:
    dc = DevCluster(CLUSTER)
    url = dc.start()
    yield NomadClient(NomadSettings(address=url))
    dc.stop()


def test_nodes_decode_with_mig_and_whole_gpus(client: NomadClient) -> None:
    (node,) = [decode_node(n) for n in client.nodes()]
    assert node.gpus and node.migs
    assert all(m.id.startswith("MIG-") and " MIG " in m.device_name for m in node.migs)


def test_parse_error_is_rejected_with_nomads_text(client: NomadClient) -> None:
    with pytest.raises(NomadRejected, match="Failed to parse job"):
        client.parse('job "x" { nonsense {')


def test_missing_objects(client: NomadClient) -> None:
    assert client.job("no-such-job") is None
    with pytest.raises(NomadNotFound, match="node not found"):
        client.node("0000")


def test_register_with_submission_round_trips(client: NomadClient) -> None:
    hcl = ('job "edge-test" {\n  type = "batch"\n  datacenters = ["dc1"]\n  group "g" {\n    task "t" {\n'
           '      driver = "docker"\n      config { image = "x" }\n    }\n  }\n}\n')
    job = client.parse(hcl)
    client.register(job, hcl)
    assert (client.job("edge-test") or {}).get("ID") == "edge-test"
    client.deregister("edge-test", purge=True)


def test_unreachable_nomad_is_retryable() -> None:
    client = NomadClient(NomadSettings(address="http://127.0.0.1:9", timeout_s=1))
    with pytest.raises(NomadUnavailable) as info:
        client.nodes()
    assert info.value.retryable
