"""While Nomad's servers have no leader, `GET /v1/status/leader` is held, then answers 500 "No cluster
leader" (`Status.Leader` forwards like any read, nomad/status_endpoint.go; `getLeaderForRPC`,
nomad/rpc.go, v2.0.5), and only a stale read answers `200 ""`: neither is "Nomad answers"."""

from __future__ import annotations

import pytest

from nomad_gpu.devcluster import DevCluster
from nomad_gpu.nomad.client import NomadClient, NomadUnavailable
from nomad_gpu.nomad.connection import NomadSettings

CLUSTER = {"name": "leader", "nodes": [{"name": "n1", "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "count": 1, "memory_mib": 81920}]}]}


@pytest.mark.e2e
def test_no_leader_is_not_reachable() -> None:
    with DevCluster(CLUSTER, rpc_hold_s=0.2) as dc:
        client = NomadClient(NomadSettings(address=dc.url))
        assert client.leader() == "127.0.0.1:4647"
        dc.set_leader(False)
        with pytest.raises(NomadUnavailable, match="HTTP 500: No cluster leader"):
            client.leader()
        dc.set_leader(True)
        assert client.leader()
