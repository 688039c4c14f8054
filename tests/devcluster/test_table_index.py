"""A list's `X-Nomad-Index` is its table's index, not the raft index (`state.Index("allocs")`,
nomad/alloc_endpoint.go `List`; `"nodes"`, nomad/node_endpoint.go `List`, v2.0.5)."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .helpers import job_allocs, jobspec, submit, wait_until

pytestmark = pytest.mark.server  # each test starts a dev cluster


def _index(cluster: DevCluster, path: str) -> int:
    return int(requests.get(f"{cluster.url}{path}", timeout=5).headers["X-Nomad-Index"])


def test_each_list_answers_with_its_own_tables_index(seed: DevCluster, client: nomad.Nomad) -> None:
    nodes_before = _index(seed, "/v1/nodes")
    submit(client, jobspec("indexed", gpus=1, duration=3600))
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "indexed") if a["client_status"] == "running"])
    assert _index(seed, "/v1/nodes") == nodes_before, "no node was written"
    allocs = _index(seed, "/v1/allocations")
    assert allocs > nodes_before and allocs == max(a["ModifyIndex"] for a in client.allocations.get_allocations())
    assert _index(seed, "/v1/jobs") <= _index(seed, "/v1/evaluations") <= seed.audit()["index"]
