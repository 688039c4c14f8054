"""What a write's reply carries: the agent sets only `X-Nomad-Index` (`setIndex`) on a register
(`jobUpdate`), a deregister (`jobDelete`) and an allocation stop (`allocStop`), command/agent/*_endpoint.go,
v2.0.5; `X-Nomad-KnownLeader` and `X-Nomad-LastContact` come from `setMeta`, on reads. `Job.Register`
never calls `setQueryMeta` (nomad/job_endpoint.go), so the body's embedded QueryMeta says
`"KnownLeader": false` even with a leader: a client must not read it as "no leader"."""

from __future__ import annotations

import nomad
import pytest
import requests

from nomad_gpu.devcluster import DevCluster

from .helpers import job_allocs, jobspec, wait_until

pytestmark = pytest.mark.server  # starts a server or subprocess: not in `make check`


def _only_the_index(reply: requests.Response) -> None:
    assert reply.status_code == 200, reply.text
    assert int(reply.headers["X-Nomad-Index"]) >= 1
    assert "X-Nomad-KnownLeader" not in reply.headers and "X-Nomad-LastContact" not in reply.headers


def test_write_replies_carry_only_the_index(seed: DevCluster, client: nomad.Nomad) -> None:
    job = client.jobs.parse(jobspec("w", gpus=1, duration=3600), canonicalize=True)
    registered = requests.post(f"{seed.url}/v1/jobs", json={"Job": job}, timeout=5)
    _only_the_index(registered)
    body = registered.json()
    index = int(registered.headers["X-Nomad-Index"])
    assert (body["KnownLeader"], body["LastContact"], body["Index"]) == (False, 0, index)
    _only_the_index(requests.post(f"{seed.url}/v1/job/w", json={"Job": job}, timeout=5))
    wait_until(lambda: job_allocs(seed.audit(), "w"))
    (alloc,) = job_allocs(seed.audit(), "w")
    _only_the_index(requests.post(f"{seed.url}/v1/allocation/{alloc['alloc_id']}/stop", timeout=5))
    _only_the_index(requests.delete(f"{seed.url}/v1/job/w", timeout=5))
    read = requests.get(f"{seed.url}/v1/job/w", timeout=5)  # a read does carry the leader headers
    assert read.headers["X-Nomad-KnownLeader"] == "true" and read.headers["X-Nomad-LastContact"] == "0"
