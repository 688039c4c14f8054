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
    # the running allocation wrote the job's summary after the register's evaluation (the test below)
    assert _index(seed, "/v1/evaluations") <= _index(seed, "/v1/jobs") <= seed.audit()["index"]


def test_the_jobs_list_answers_the_highest_of_jobs_and_job_summary(seed: DevCluster, client: nomad.Nomad) -> None:
    """`Job.List`: `max(state.Index("jobs"), state.Index("job_summary"))` (nomad/job_endpoint.go, v2.0.5); an
    allocation's client status change writes the summary (`updateSummaryWithAlloc`, nomad/state/state_store.go)."""
    submit(client, jobspec("summed", gpus=1, duration=3600))
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "summed") if a["client_status"] == "running"])
    (alloc,) = client.job.get_allocations("summed")
    job_written = client.job.get_job("summed")["ModifyIndex"]
    assert alloc["ModifyIndex"] > job_written
    assert _index(seed, "/v1/jobs") == alloc["ModifyIndex"], "the running allocation wrote the job's summary"
    client.job.deregister_job("summed")
    stopped = client.job.get_job("summed")["ModifyIndex"]
    assert stopped > alloc["ModifyIndex"]
    # the desired stop leaves the summary alone; the client's report of the stopped task writes it (last)
    wait_until(lambda: [a for a in job_allocs(seed.audit(), "summed") if a["client_status"] == "complete"])
    (reported,) = client.job.get_allocations("summed")
    assert reported["ModifyIndex"] > stopped
    assert _index(seed, "/v1/jobs") == reported["ModifyIndex"]
